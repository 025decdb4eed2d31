package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/plantstore/plantstore"
)

var _ plantstore.WebhookStore = (*DB)(nil)

func (db *DB) AddSubscriber(ctx context.Context, url, secret string) (plantstore.Subscriber, error) {
	s := plantstore.Subscriber{URL: url, Secret: secret, CreatedAt: db.now().UTC().Truncate(time.Microsecond)}
	err := retry(ctx, func(ctx context.Context) error {
		return db.pool.QueryRow(ctx, `INSERT INTO webhook_subscribers (url, secret, created_at) VALUES ($1, $2, $3) RETURNING id`,
			url, secret, s.CreatedAt).Scan(&s.ID)
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
			(SELECT count(*) FROM webhook_deliveries d WHERE d.subscriber_id = s.id AND d.failed_at IS NOT NULL)
		FROM webhook_subscribers s LEFT JOIN webhook_subscriber_errors e ON e.subscriber_id = s.id ORDER BY s.id`)
	if err != nil {
		return nil, db.storeError("list webhook subscribers", err)
	}
	var subs []plantstore.Subscriber
	var s plantstore.Subscriber
	_, err = pgx.ForEachRow(rows, []any{&s.ID, &s.URL, &s.CreatedAt, &s.DisabledAt, &s.DisabledReason, &s.Delivered, &s.LastError, &s.LastErrorAt, &s.Pending, &s.Failed}, func() error {
		s.CreatedAt = s.CreatedAt.UTC()
		if s.DisabledAt != nil {
			at := s.DisabledAt.UTC()
			s.DisabledAt = &at
		}
		if s.LastErrorAt != nil {
			at := s.LastErrorAt.UTC()
			s.LastErrorAt = &at
		}
		subs = append(subs, s)
		s.DisabledAt, s.LastErrorAt = nil, nil // fresh pointers for the next row
		return nil
	})
	if err != nil {
		return nil, db.storeError("list webhook subscribers", err)
	}
	return subs, nil
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
// never lease one subscriber.
func (db *DB) ClaimSubscribers(ctx context.Context, owner string, lease time.Duration, n int) ([]plantstore.Subscriber, error) {
	now := db.now()
	var subs []plantstore.Subscriber
	err := retry(ctx, func(ctx context.Context) error {
		subs = subs[:0]
		rows, err := db.pool.Query(ctx, `UPDATE webhook_subscribers SET lease_owner = $1, lease_until = $2
			WHERE id IN (
				SELECT s.id FROM webhook_subscribers s
				WHERE s.disabled_at IS NULL AND (s.lease_until IS NULL OR s.lease_until <= $3)
				  AND (SELECT d.next_attempt_at FROM webhook_deliveries d
				       WHERE d.subscriber_id = s.id AND d.failed_at IS NULL ORDER BY d.id LIMIT 1) <= $3
				ORDER BY s.id LIMIT $4
				FOR UPDATE SKIP LOCKED)
			RETURNING id, url, secret`, owner, now.Add(lease), now, n)
		if err != nil {
			return err
		}
		var s plantstore.Subscriber
		_, err = pgx.ForEachRow(rows, []any{&s.ID, &s.URL, &s.Secret}, func() error {
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

func (db *DB) DueDeliveries(ctx context.Context, subscriberID int64, n int) ([]plantstore.Delivery, error) {
	rows, err := db.pool.Query(ctx, `SELECT id, event_id, plant_id, name, tag, created_at, attempts, next_attempt_at
		FROM webhook_deliveries WHERE subscriber_id = $1 AND failed_at IS NULL ORDER BY id LIMIT $2`, subscriberID, n)
	if err != nil {
		return nil, db.storeError("read webhook deliveries", err)
	}
	now := db.now()
	var ds []plantstore.Delivery
	var d plantstore.Delivery
	var next time.Time
	errNotDue := errors.New("not due")
	_, err = pgx.ForEachRow(rows, []any{&d.ID, &d.EventID, &d.Plant.ID, &d.Plant.Name, &d.Plant.Tag, &d.CreatedAt, &d.Attempts, &next}, func() error {
		if len(ds) == 0 && next.After(now) {
			return errNotDue // the head is not due; the rest wait behind it
		}
		d.SubscriberID = subscriberID
		d.CreatedAt = d.CreatedAt.UTC()
		ds = append(ds, d)
		d.Plant.Tag = nil // a fresh pointer for the next row's tag
		return nil
	})
	if errors.Is(err, errNotDue) {
		return nil, nil
	}
	if err != nil {
		return nil, db.storeError("read webhook deliveries", err)
	}
	return ds, nil
}

func (db *DB) RecordAttempts(ctx context.Context, owner string, subscriberID int64, results []plantstore.AttemptResult, lease time.Duration, release bool) (bool, error) {
	var held bool
	err := retry(ctx, func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
			now := db.now()
			var delivered int64
			var last *plantstore.AttemptResult // the newest result that changed a delivery
			for i, r := range results {
				var tag pgconn.CommandTag
				var err error
				if r.Delivered {
					tag, err = tx.Exec(ctx, `DELETE FROM webhook_deliveries WHERE id = $1 AND subscriber_id = $2`, r.DeliveryID, subscriberID)
				} else {
					var failedAt *time.Time
					if r.GiveUp {
						failedAt = &now
					}
					var status *int
					if r.Status != 0 {
						status = &r.Status
					}
					tag, err = tx.Exec(ctx, `UPDATE webhook_deliveries
						SET attempts = attempts + 1, next_attempt_at = $1, last_status = $2, last_error = $3, failed_at = $4
						WHERE id = $5 AND subscriber_id = $6 AND failed_at IS NULL`,
						r.NextAttempt, status, r.Error, failedAt, r.DeliveryID, subscriberID)
				}
				if err != nil {
					return err
				}
				if n := tag.RowsAffected(); n > 0 {
					last = &results[i]
					if r.Delivered {
						delivered += n
					}
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
			var leaseUntil *time.Time
			if !release {
				until := now.Add(lease)
				leaseUntil = &until
			}
			tag, err := tx.Exec(ctx, `UPDATE webhook_subscribers
				SET lease_owner = CASE WHEN $1::timestamptz IS NULL THEN NULL ELSE lease_owner END, lease_until = $1
				WHERE id = $2 AND lease_owner = $3`, leaseUntil, subscriberID, owner)
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
