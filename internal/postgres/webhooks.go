package postgres

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/plantstore/plantstore"
)

var _ plantstore.WebhookStore = (*DB)(nil)

func (db *DB) AddSubscriber(ctx context.Context, url, secret string) (plantstore.Subscriber, error) {
	return db.AddSubscriberFor(ctx, url, secret, []string{plantstore.EventCreated})
}

func (db *DB) AddSubscriberFor(ctx context.Context, url, secret string, events []string) (plantstore.Subscriber, error) {
	events, err := plantstore.SubscriberEvents(events)
	if err != nil {
		return plantstore.Subscriber{}, err
	}
	s := plantstore.Subscriber{URL: url, Secret: secret, Events: events, CreatedAt: db.now().UTC().Truncate(time.Microsecond)}
	// The default, plant.created alone, needs no webhook_subscriber_events
	// row; one statement writes both otherwise.
	custom := !slices.Equal(events, []string{plantstore.EventCreated})
	err = retry(ctx, func(ctx context.Context) error {
		return db.pool.QueryRow(ctx, `WITH sub AS (
				INSERT INTO webhook_subscribers (url, secret, created_at) VALUES ($1, $2, $3) RETURNING id
			), types AS (
				INSERT INTO webhook_subscriber_events (subscriber_id, created, updated, deleted)
				SELECT id, $5, $6, $7 FROM sub WHERE $4
			)
			SELECT id FROM sub`,
			url, secret, s.CreatedAt, custom, slices.Contains(events, plantstore.EventCreated),
			slices.Contains(events, plantstore.EventUpdated), slices.Contains(events, plantstore.EventDeleted)).Scan(&s.ID)
	})
	if err != nil {
		return plantstore.Subscriber{}, db.storeError("add webhook subscriber", err)
	}
	return s, nil
}

func (db *DB) Subscribers(ctx context.Context) ([]plantstore.Subscriber, error) {
	rows, err := db.pool.Query(ctx, `SELECT s.id, s.url, s.created_at, s.disabled_at, coalesce(s.disabled_reason, ''), s.delivered, coalesce(s.last_error, ''),
			CASE WHEN s.last_error IS NOT NULL THEN e.last_error_at END,
			(SELECT count(*) FROM webhook_deliveries d WHERE d.subscriber_id = s.id AND d.failed_at IS NULL),
			(SELECT count(*) FROM webhook_deliveries d WHERE d.subscriber_id = s.id AND d.failed_at IS NOT NULL),
			t.subscriber_id IS NOT NULL, coalesce(t.created, false), coalesce(t.updated, false), coalesce(t.deleted, false),
			CASE WHEN s.lease_owner = '' AND s.lease_until > $1 AND s.disabled_at IS NULL THEN s.lease_until END
		FROM webhook_subscribers s LEFT JOIN webhook_subscriber_errors e ON e.subscriber_id = s.id
		LEFT JOIN webhook_subscriber_events t ON t.subscriber_id = s.id ORDER BY s.id`, db.now())
	if err != nil {
		return nil, db.storeError("list webhook subscribers", err)
	}
	var subs []plantstore.Subscriber
	var s plantstore.Subscriber
	var hasEvents, onCreated, onUpdated, onDeleted bool
	_, err = pgx.ForEachRow(rows, []any{&s.ID, &s.URL, &s.CreatedAt, &s.DisabledAt, &s.DisabledReason, &s.Delivered, &s.LastError, &s.LastErrorAt, &s.Pending, &s.Failed,
		&hasEvents, &onCreated, &onUpdated, &onDeleted, &s.NextProbe}, func() error {
		s.Events = subscribedEvents(hasEvents, onCreated, onUpdated, onDeleted)
		s.CreatedAt = s.CreatedAt.UTC()
		if s.DisabledAt != nil {
			at := s.DisabledAt.UTC()
			s.DisabledAt = &at
		}
		if s.LastErrorAt != nil {
			at := s.LastErrorAt.UTC()
			s.LastErrorAt = &at
		}
		if s.NextProbe != nil {
			at := s.NextProbe.UTC()
			s.NextProbe = &at
		}
		subs = append(subs, s)
		s.DisabledAt, s.LastErrorAt, s.NextProbe = nil, nil, nil // fresh pointers for the next row
		return nil
	})
	if err != nil {
		return nil, db.storeError("list webhook subscribers", err)
	}
	return subs, nil
}

// subscribedEvents is the event types of a subscriber's
// webhook_subscriber_events row, or of none (valid false).
func subscribedEvents(valid, created, updated, deleted bool) []string {
	if !valid {
		return []string{plantstore.EventCreated}
	}
	var events []string
	for i, on := range []bool{created, updated, deleted} {
		if on {
			events = append(events, plantstore.EventTypes[i])
		}
	}
	return events
}

func (db *DB) RemoveSubscriber(ctx context.Context, id int64) error {
	// Its deliveries go with it (ON DELETE CASCADE).
	tag, err := db.pool.Exec(ctx, `DELETE FROM webhook_subscribers WHERE id = $1`, id)
	if err != nil {
		return db.storeError("remove webhook subscriber", err)
	}
	if tag.RowsAffected() == 0 {
		return plantstore.Errorf(plantstore.ENOTFOUND, "webhook subscriber %d not found", id)
	}
	return nil
}

// ClaimSubscribers locks the candidates it picks and skips those another
// instance is claiming at the same moment (SKIP LOCKED), so two instances
// never lease one subscriber. A candidate has a due pending delivery,
// which may wait behind another of its plant that is not due: then the
// claim finds nothing to send, and gives the subscriber back. The one
// that has waited longest goes first: never leased, or whose lease ended
// first (a lease given back records when, in lease_until), so that with
// more subscribers due than workers they take turns.
func (db *DB) ClaimSubscribers(ctx context.Context, owner string, lease time.Duration, n int) ([]plantstore.Subscriber, error) {
	now := db.now()
	var subs []plantstore.Subscriber
	err := retry(ctx, func(ctx context.Context) error {
		subs = subs[:0]
		rows, err := db.pool.Query(ctx, `UPDATE webhook_subscribers SET lease_owner = $1, lease_until = $2
			WHERE id IN (
				SELECT s.id FROM webhook_subscribers s
				WHERE s.disabled_at IS NULL AND (s.lease_until IS NULL OR s.lease_until <= $3)
				  AND EXISTS (SELECT 1 FROM webhook_deliveries d
				       WHERE d.subscriber_id = s.id AND d.failed_at IS NULL AND d.next_attempt_at <= $3)
				ORDER BY s.lease_until NULLS FIRST, s.id LIMIT $4
				FOR UPDATE SKIP LOCKED)
			RETURNING id, url, secret, coalesce(last_error, '')`, owner, now.Add(lease), now, n)
		if err != nil {
			return err
		}
		var s plantstore.Subscriber
		_, err = pgx.ForEachRow(rows, []any{&s.ID, &s.URL, &s.Secret, &s.LastError}, func() error {
			subs = append(subs, s)
			return nil
		})
		return err
	})
	if err != nil {
		return nil, db.storeError("claim webhook subscribers", err)
	}
	return subs, nil
}

// deliveryColumns are what scanDeliveries reads, of webhook_deliveries d.
const deliveryColumns = `d.id, d.subscriber_id, d.event_id, coalesce(d.event_type, 'plant.created'), coalesce(d.event_seq, 0),
	d.plant_id, d.name, d.tag, d.created_at, d.attempts, d.first_failed_at, d.failed_at, coalesce(d.last_status, 0), coalesce(d.last_error, '')`

func scanDeliveries(rows pgx.Rows) ([]plantstore.Delivery, error) {
	var ds []plantstore.Delivery
	var d plantstore.Delivery
	_, err := pgx.ForEachRow(rows, []any{&d.ID, &d.SubscriberID, &d.EventID, &d.EventType, &d.Seq, &d.Plant.ID, &d.Plant.Name, &d.Plant.Tag,
		&d.CreatedAt, &d.Attempts, &d.FirstFailedAt, &d.ParkedAt, &d.LastStatus, &d.LastError}, func() error {
		d.CreatedAt = d.CreatedAt.UTC()
		for _, at := range []**time.Time{&d.FirstFailedAt, &d.ParkedAt} {
			if *at != nil {
				utc := (*at).UTC()
				*at = &utc
			}
		}
		ds = append(ds, d)
		d.Plant.Tag, d.FirstFailedAt, d.ParkedAt = nil, nil, nil // fresh pointers for the next row
		return nil
	})
	return ds, err
}

func (db *DB) DueDeliveries(ctx context.Context, subscriberID int64, n int) ([]plantstore.Delivery, error) {
	// The subquery probes webhook_deliveries_waiting, which holds only
	// the deliveries that failed and wait for a retry: few.
	rows, err := db.pool.Query(ctx, `SELECT `+deliveryColumns+`
		FROM webhook_deliveries d
		WHERE d.subscriber_id = $1 AND d.failed_at IS NULL AND d.next_attempt_at <= $2
		  AND NOT EXISTS (SELECT 1 FROM webhook_deliveries w
		       WHERE w.subscriber_id = $1 AND w.plant_id = d.plant_id AND w.failed_at IS NULL AND w.attempts > 0
		         AND w.id < d.id AND w.next_attempt_at > $2)
		ORDER BY d.id LIMIT $3`, subscriberID, db.now(), n)
	if err != nil {
		return nil, db.storeError("read webhook deliveries", err)
	}
	ds, err := scanDeliveries(rows)
	if err != nil {
		return nil, db.storeError("read webhook deliveries", err)
	}
	return ds, nil
}

func (db *DB) ParkedDeliveries(ctx context.Context, subscriberID int64, n int) ([]plantstore.Delivery, error) {
	rows, err := db.pool.Query(ctx, `SELECT `+deliveryColumns+`
		FROM webhook_deliveries d
		WHERE d.failed_at IS NOT NULL AND ($1 = 0 OR d.subscriber_id = $1)
		ORDER BY d.id LIMIT $2`, subscriberID, n)
	if err != nil {
		return nil, db.storeError("list parked webhook deliveries", err)
	}
	ds, err := scanDeliveries(rows)
	if err != nil {
		return nil, db.storeError("list parked webhook deliveries", err)
	}
	return ds, nil
}

func (db *DB) RetryDeliveries(ctx context.Context, subscriberID int64, ids []int64) (int, error) {
	if len(ids) == 0 && subscriberID == 0 {
		return 0, plantstore.Errorf(plantstore.EINVALID, "retry which deliveries? give their ids or a subscriber")
	}
	unique := slices.Compact(slices.Sorted(slices.Values(ids)))
	errMissing := errors.New("missing")
	var n int64
	var missing error
	err := retry(ctx, func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
			if subscriberID != 0 {
				var active bool
				if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM webhook_subscribers WHERE id = $1 AND disabled_at IS NULL)`, subscriberID).Scan(&active); err != nil {
					return err
				}
				if !active {
					return plantstore.Errorf(plantstore.ENOTFOUND, "no active webhook subscriber %d", subscriberID)
				}
			}
			rows, err := tx.Query(ctx, `UPDATE webhook_deliveries
				SET failed_at = NULL, attempts = 0, first_failed_at = NULL, next_attempt_at = $1
				WHERE failed_at IS NOT NULL AND ($2 = 0 OR subscriber_id = $2)
				  AND (coalesce(cardinality($3::bigint[]), 0) = 0 OR id = ANY($3::bigint[]))
				  AND subscriber_id IN (SELECT id FROM webhook_subscribers WHERE disabled_at IS NULL)
				RETURNING id`,
				db.now(), subscriberID, unique)
			if err != nil {
				return err
			}
			retried, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				return err
			}
			n = int64(len(retried))
			if len(unique) > 0 && len(retried) != len(unique) {
				missing = plantstore.NotRetried(unique, retried)
				return errMissing
			}
			if n == 0 {
				return nil
			}
			// An operator's retry goes now, not at the next probe of a
			// receiver that is down (PauseSubscriber).
			_, err = tx.Exec(ctx, `UPDATE webhook_subscribers SET lease_until = NULL
				WHERE lease_owner = '' AND lease_until > $1
				  AND id IN (SELECT subscriber_id FROM webhook_deliveries WHERE id = ANY($2::bigint[]))`, db.now(), retried)
			return err
		})
	})
	if errors.Is(err, errMissing) {
		return 0, missing
	}
	if err != nil {
		return 0, db.storeError("retry webhook deliveries", err)
	}
	if n > 0 && db.enqueued != nil {
		db.enqueued()
	}
	return int(n), nil
}

func (db *DB) RecordAttempts(ctx context.Context, owner string, subscriberID int64, results []plantstore.AttemptResult, lease time.Duration, release bool) (bool, error) {
	// The deliveries done go in one statement, the failures one each:
	// failures are few.
	var done []int64
	lastDone := -1
	for i, r := range results {
		if r.Delivered {
			done = append(done, r.DeliveryID)
			lastDone = i
		}
	}
	var held bool
	err := retry(ctx, func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
			now := db.now()
			var delivered int64
			var last *plantstore.AttemptResult // the newest result that changed a delivery
			if len(done) > 0 {
				tag, err := tx.Exec(ctx, `DELETE FROM webhook_deliveries WHERE subscriber_id = $1 AND id = ANY($2::bigint[])`, subscriberID, done)
				if err != nil {
					return err
				}
				if delivered = tag.RowsAffected(); delivered > 0 {
					last = &results[lastDone]
				}
			}
			for i, r := range results {
				if r.Delivered {
					continue
				}
				var failedAt *time.Time
				if r.GiveUp {
					failedAt = &now
				}
				var status *int
				if r.Status != 0 {
					status = &r.Status
				}
				tag, err := tx.Exec(ctx, `UPDATE webhook_deliveries
					SET attempts = attempts + 1, next_attempt_at = $1, last_status = $2, last_error = $3, failed_at = $4,
					    first_failed_at = coalesce(first_failed_at, $7)
					WHERE id = $5 AND subscriber_id = $6 AND failed_at IS NULL`,
					r.NextAttempt, status, r.Error, failedAt, r.DeliveryID, subscriberID, now)
				if err != nil {
					return err
				}
				if tag.RowsAffected() > 0 && (last == nil || i > lastDone) {
					last = &results[i]
				}
			}
			// The newest attempt says whether the subscriber is failing.
			if last != nil {
				var err error
				if last.Delivered {
					err = clearLastError(ctx, tx, subscriberID)
				} else {
					err = setLastError(ctx, tx, subscriberID, last.Error, now)
				}
				if err != nil {
					return err
				}
			}
			if delivered > 0 {
				if _, err := tx.Exec(ctx, `UPDATE webhook_subscribers SET delivered = delivered + $1 WHERE id = $2`, delivered, subscriberID); err != nil {
					return err
				}
			}
			// A lease given back records when, for the claims' order.
			leaseUntil := now
			if !release {
				leaseUntil = now.Add(lease)
			}
			tag, err := tx.Exec(ctx, `UPDATE webhook_subscribers
				SET lease_owner = CASE WHEN $4 THEN NULL ELSE lease_owner END, lease_until = $1
				WHERE id = $2 AND lease_owner = $3`, leaseUntil, subscriberID, owner, release)
			if err != nil {
				return err
			}
			held = tag.RowsAffected() == 1
			return nil
		})
	})
	if err != nil {
		return false, db.storeError("record webhook attempts", err)
	}
	return held, nil
}

func (db *DB) PauseSubscriber(ctx context.Context, owner string, subscriberID int64, until time.Time) (bool, error) {
	var held bool
	err := retry(ctx, func(ctx context.Context) error {
		// A lease given back records when it may be claimed again, in
		// lease_until: here, later than now. The owner '' marks a pause
		// (sqlite.PauseSubscriber says why).
		tag, err := db.pool.Exec(ctx, `UPDATE webhook_subscribers SET lease_owner = '', lease_until = $1
			WHERE id = $2 AND lease_owner = $3`, until, subscriberID, owner)
		held = tag.RowsAffected() == 1
		return err
	})
	if err != nil {
		return false, db.storeError("pause webhook subscriber", err)
	}
	return held, nil
}

func (db *DB) RetryNow(ctx context.Context, subscriberID int64) error {
	err := retry(ctx, func(ctx context.Context) error {
		now := db.now()
		_, err := db.pool.Exec(ctx, `UPDATE webhook_deliveries SET next_attempt_at = $1
			WHERE subscriber_id = $2 AND failed_at IS NULL AND attempts > 0 AND next_attempt_at > $1`, now, subscriberID)
		return err
	})
	return db.storeError("retry webhook deliveries now", err)
}

func (db *DB) DisableSubscriber(ctx context.Context, id int64, reason string) error {
	var found bool
	err := retry(ctx, func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
			now := db.now()
			tag, err := tx.Exec(ctx, `UPDATE webhook_subscribers
				SET disabled_at = coalesce(disabled_at, $1), disabled_reason = $2, lease_owner = NULL, lease_until = NULL
				WHERE id = $3`, now, reason, id)
			if err != nil {
				return err
			}
			if found = tag.RowsAffected() == 1; !found {
				return nil
			}
			if err := setLastError(ctx, tx, id, reason, now); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `UPDATE webhook_deliveries SET failed_at = $1, last_error = $2
				WHERE subscriber_id = $3 AND failed_at IS NULL`, now, reason, id)
			return err
		})
	})
	if err != nil {
		return db.storeError("disable webhook subscriber", err)
	}
	if !found {
		return plantstore.Errorf(plantstore.ENOTFOUND, "webhook subscriber %d not found", id)
	}
	return nil
}

// setLastError records reason, at at, as the subscriber's last error.
func setLastError(ctx context.Context, tx pgx.Tx, subscriberID int64, reason string, at time.Time) error {
	if _, err := tx.Exec(ctx, `UPDATE webhook_subscribers SET last_error = $1 WHERE id = $2`, reason, subscriberID); err != nil {
		return err
	}
	// From the subscriber's row, so a subscriber removed meanwhile gets none.
	_, err := tx.Exec(ctx, `INSERT INTO webhook_subscriber_errors (subscriber_id, last_error_at)
		SELECT id, $2::timestamptz FROM webhook_subscribers WHERE id = $1
		ON CONFLICT (subscriber_id) DO UPDATE SET last_error_at = excluded.last_error_at`, subscriberID, at)
	return err
}

// clearLastError forgets the last error of a subscriber that delivered,
// unless it is disabled: then its last error is why.
func clearLastError(ctx context.Context, tx pgx.Tx, subscriberID int64) error {
	tag, err := tx.Exec(ctx, `UPDATE webhook_subscribers SET last_error = NULL
		WHERE id = $1 AND disabled_at IS NULL AND last_error IS NOT NULL`, subscriberID)
	if err != nil || tag.RowsAffected() == 0 {
		return err
	}
	_, err = tx.Exec(ctx, `DELETE FROM webhook_subscriber_errors WHERE subscriber_id = $1`, subscriberID)
	return err
}

func (db *DB) CountDeliveries(ctx context.Context) (plantstore.DeliveryCounts, error) {
	var c plantstore.DeliveryCounts
	err := db.pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM webhook_deliveries WHERE failed_at IS NULL),
			(SELECT coalesce(sum(delivered), 0)::bigint FROM webhook_subscribers),
			(SELECT count(*) FROM webhook_deliveries WHERE failed_at IS NOT NULL)`).Scan(&c.Pending, &c.Delivered, &c.Failed)
	if err != nil {
		return plantstore.DeliveryCounts{}, db.storeError("count webhook deliveries", err)
	}
	return c, nil
}
