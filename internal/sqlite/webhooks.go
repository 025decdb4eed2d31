package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/plantstore/plantstore"
)

var _ plantstore.WebhookStore = (*DB)(nil)

func (db *DB) AddSubscriber(ctx context.Context, url, secret string) (plantstore.Subscriber, error) {
	return db.AddSubscriberFor(ctx, url, secret, []string{plantstore.EventCreated})
}

func (db *DB) AddSubscriberFor(ctx context.Context, url, secret string, events []string) (plantstore.Subscriber, error) {
	const op = "add webhook subscriber"
	events, err := plantstore.SubscriberEvents(events)
	if err != nil {
		return plantstore.Subscriber{}, err
	}
	s := plantstore.Subscriber{URL: url, Secret: secret, Events: events, CreatedAt: db.now().UTC().Truncate(time.Millisecond)}
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return plantstore.Subscriber{}, storeError(op, err)
	}
	defer tx.Rollback()
	// It gets the events recorded after this transaction (outbox.go).
	err = tx.QueryRowContext(ctx, `INSERT INTO webhook_subscribers (url, secret, created_at, since_event)
		VALUES (?, ?, ?, `+lastEventSQL+`) RETURNING id`,
		url, secret, millis(s.CreatedAt)).Scan(&s.ID)
	if err != nil {
		return plantstore.Subscriber{}, storeError(op, err)
	}
	// The default, plant.created alone, needs no row.
	if !slices.Equal(events, []string{plantstore.EventCreated}) {
		if _, err := tx.ExecContext(ctx, `INSERT INTO webhook_subscriber_events (subscriber_id, created, updated, deleted) VALUES (?, ?, ?, ?)`,
			s.ID, slices.Contains(events, plantstore.EventCreated), slices.Contains(events, plantstore.EventUpdated),
			slices.Contains(events, plantstore.EventDeleted)); err != nil {
			return plantstore.Subscriber{}, storeError(op, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return plantstore.Subscriber{}, storeError(op, err)
	}
	return s, nil
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

func (db *DB) Subscribers(ctx context.Context) ([]plantstore.Subscriber, error) {
	rows, err := db.read.QueryContext(ctx, `SELECT s.id, s.url, s.created_at, s.disabled_at, s.disabled_reason, s.delivered, s.last_error, e.last_error_at,
			(SELECT count(*) FROM webhook_deliveries d WHERE d.subscriber_id = s.id AND d.failed_at IS NULL) + `+pendingInFeedSQL+`,
			(SELECT count(*) FROM webhook_deliveries d WHERE d.subscriber_id = s.id AND d.failed_at IS NOT NULL),
			t.subscriber_id IS NOT NULL, coalesce(t.created, 0), coalesce(t.updated, 0), coalesce(t.deleted, 0),
			CASE WHEN s.lease_owner = '' AND s.lease_until > ? AND s.disabled_at IS NULL THEN s.lease_until END
		FROM webhook_subscribers s LEFT JOIN webhook_subscriber_errors e ON e.subscriber_id = s.id
		LEFT JOIN webhook_subscriber_events t ON t.subscriber_id = s.id ORDER BY s.id`, millis(db.now()))
	if err != nil {
		return nil, storeError("list webhook subscribers", err)
	}
	defer rows.Close()
	var subs []plantstore.Subscriber
	for rows.Next() {
		var s plantstore.Subscriber
		var created int64
		var disabled, lastErrorAt, nextProbe sql.NullInt64
		var reason, lastError sql.NullString
		var hasEvents, onCreated, onUpdated, onDeleted bool
		if err := rows.Scan(&s.ID, &s.URL, &created, &disabled, &reason, &s.Delivered, &lastError, &lastErrorAt, &s.Pending, &s.Failed,
			&hasEvents, &onCreated, &onUpdated, &onDeleted, &nextProbe); err != nil {
			return nil, storeError("list webhook subscribers", err)
		}
		s.Events = subscribedEvents(hasEvents, onCreated, onUpdated, onDeleted)
		s.CreatedAt = time.UnixMilli(created).UTC()
		if disabled.Valid {
			at := fromMillis(disabled)
			s.DisabledAt = &at
		}
		s.DisabledReason, s.LastError = reason.String, lastError.String
		if lastErrorAt.Valid && s.LastError != "" {
			at := fromMillis(lastErrorAt)
			s.LastErrorAt = &at
		}
		if nextProbe.Valid {
			at := fromMillis(nextProbe)
			s.NextProbe = &at
		}
		subs = append(subs, s)
	}
	return subs, storeError("list webhook subscribers", rows.Err())
}

func (db *DB) RemoveSubscriber(ctx context.Context, id int64) error {
	// Its deliveries go with it (ON DELETE CASCADE).
	res, err := db.write.ExecContext(ctx, `DELETE FROM webhook_subscribers WHERE id = ?`, id)
	if err != nil {
		return storeError("remove webhook subscriber", err)
	}
	return mustHaveAffected(res, "webhook subscriber %d not found", id)
}

// ClaimSubscribers claims subscribers with a due pending delivery, or
// events after the outbox cursor recorded since they were added (the
// claim's DueDeliveries copies them; they may be of types the subscriber
// does not want). A delivery may wait behind another of its plant which
// is not due: then the claim finds nothing to send, and gives the
// subscriber back. The one that has waited longest goes first: never
// leased, or whose lease ended first (a lease given back records when,
// in lease_until), so that with more subscribers due than dispatchers'
// workers they take turns.
func (db *DB) ClaimSubscribers(ctx context.Context, owner string, lease time.Duration, n int) ([]plantstore.Subscriber, error) {
	now := db.now()
	rows, err := db.write.QueryContext(ctx, `UPDATE webhook_subscribers SET lease_owner = ?1, lease_until = ?2
		WHERE id IN (
			SELECT s.id FROM webhook_subscribers s
			WHERE s.disabled_at IS NULL AND (s.lease_until IS NULL OR s.lease_until <= ?3)
			  AND (EXISTS (SELECT 1 FROM webhook_deliveries d
			       WHERE d.subscriber_id = s.id AND d.failed_at IS NULL AND d.next_attempt_at <= ?3)
			    OR max(s.since_event, (SELECT through FROM outbox_cursor)) < `+lastEventSQL+`)
			ORDER BY s.lease_until NULLS FIRST, s.id LIMIT ?4)
		RETURNING id, url, secret, coalesce(last_error, '')`, owner, millis(now.Add(lease)), millis(now), n)
	if err != nil {
		return nil, storeError("claim webhook subscribers", err)
	}
	defer rows.Close()
	var subs []plantstore.Subscriber
	for rows.Next() {
		var s plantstore.Subscriber
		if err := rows.Scan(&s.ID, &s.URL, &s.Secret, &s.LastError); err != nil {
			return nil, storeError("claim webhook subscribers", err)
		}
		subs = append(subs, s)
	}
	return subs, storeError("claim webhook subscribers", rows.Err())
}

// deliveryColumns are what scanDelivery reads, of webhook_deliveries d.
const deliveryColumns = `d.id, d.subscriber_id, d.event_id, coalesce(d.event_type, 'plant.created'), coalesce(d.event_seq, 0),
	d.plant_id, d.name, d.tag, d.created_at, d.attempts, d.first_failed_at, d.failed_at, d.last_status, d.last_error`

func scanDelivery(rows *sql.Rows) (plantstore.Delivery, error) {
	var d plantstore.Delivery
	var tag, lastError sql.NullString
	var created int64
	var firstFailed, parked, status sql.NullInt64
	err := rows.Scan(&d.ID, &d.SubscriberID, &d.EventID, &d.EventType, &d.Seq, &d.Plant.ID, &d.Plant.Name, &tag,
		&created, &d.Attempts, &firstFailed, &parked, &status, &lastError)
	if err != nil {
		return d, err
	}
	if tag.Valid {
		d.Plant.Tag = &tag.String
	}
	d.CreatedAt = time.UnixMilli(created).UTC()
	if firstFailed.Valid {
		at := fromMillis(firstFailed)
		d.FirstFailedAt = &at
	}
	if parked.Valid {
		at := fromMillis(parked)
		d.ParkedAt = &at
	}
	d.LastStatus, d.LastError = int(status.Int64), lastError.String
	return d, nil
}

func (db *DB) DueDeliveries(ctx context.Context, subscriberID int64, n int) ([]plantstore.Delivery, error) {
	if err := db.copyOutboxFor(ctx, subscriberID, n); err != nil {
		return nil, storeError("copy webhook deliveries from the change feed", err)
	}
	rows, err := db.read.QueryContext(ctx, `SELECT `+deliveryColumns+`
		FROM webhook_deliveries d WHERE `+dueSQL+`
		ORDER BY d.id LIMIT ?3`, subscriberID, millis(db.now()), n)
	if err != nil {
		return nil, storeError("read webhook deliveries", err)
	}
	defer rows.Close()
	var ds []plantstore.Delivery
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, storeError("read webhook deliveries", err)
		}
		ds = append(ds, d)
	}
	return ds, storeError("read webhook deliveries", rows.Err())
}

func (db *DB) ParkedDeliveries(ctx context.Context, subscriberID int64, n int) ([]plantstore.Delivery, error) {
	rows, err := db.read.QueryContext(ctx, `SELECT `+deliveryColumns+`
		FROM webhook_deliveries d
		WHERE d.failed_at IS NOT NULL AND (?1 = 0 OR d.subscriber_id = ?1)
		ORDER BY d.id LIMIT ?2`, subscriberID, n)
	if err != nil {
		return nil, storeError("list parked webhook deliveries", err)
	}
	defer rows.Close()
	var ds []plantstore.Delivery
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, storeError("list parked webhook deliveries", err)
		}
		ds = append(ds, d)
	}
	return ds, storeError("list parked webhook deliveries", rows.Err())
}

func (db *DB) RetryDeliveries(ctx context.Context, subscriberID int64, ids []int64) (int, error) {
	const op = "retry webhook deliveries"
	if len(ids) == 0 && subscriberID == 0 {
		return 0, plantstore.Errorf(plantstore.EINVALID, "retry which deliveries? give their ids or a subscriber")
	}
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return 0, storeError(op, err)
	}
	defer tx.Rollback()
	if subscriberID != 0 {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM webhook_subscribers WHERE id = ? AND disabled_at IS NULL`, subscriberID).Scan(&n); err != nil {
			return 0, storeError(op, err)
		}
		if n == 0 {
			return 0, plantstore.Errorf(plantstore.ENOTFOUND, "no active webhook subscriber %d", subscriberID)
		}
	}
	idList := []byte("[]")
	if len(ids) > 0 {
		idList, _ = json.Marshal(ids)
	}
	rows, err := tx.QueryContext(ctx, `UPDATE webhook_deliveries
		SET failed_at = NULL, attempts = 0, first_failed_at = NULL, next_attempt_at = ?1
		WHERE failed_at IS NOT NULL AND (?2 = 0 OR subscriber_id = ?2)
		  AND (?3 = '[]' OR id IN (SELECT value FROM json_each(?3)))
		  AND subscriber_id IN (SELECT id FROM webhook_subscribers WHERE disabled_at IS NULL)
		RETURNING id`,
		millis(db.now()), subscriberID, string(idList))
	if err != nil {
		return 0, storeError(op, err)
	}
	var retried []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, storeError(op, err)
		}
		retried = append(retried, id)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return 0, storeError(op, err)
	}
	n := len(retried)
	if asked := slicesCompact(ids); len(ids) > 0 && n != len(asked) {
		return 0, plantstore.NotRetried(asked, retried)
	}
	// An operator's retry goes now, not at the next probe of a receiver
	// that is down (PauseSubscriber).
	if n > 0 {
		list, _ := json.Marshal(retried)
		if _, err := tx.ExecContext(ctx, `UPDATE webhook_subscribers SET lease_until = NULL
			WHERE lease_owner = '' AND lease_until > ?1
			  AND id IN (SELECT subscriber_id FROM webhook_deliveries WHERE id IN (SELECT value FROM json_each(?2)))`,
			millis(db.now()), string(list)); err != nil {
			return 0, storeError(op, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, storeError(op, err)
	}
	if n > 0 && db.enqueued != nil {
		db.enqueued()
	}
	return int(n), nil
}

// slicesCompact is ids without repeats.
func slicesCompact(ids []int64) []int64 {
	return slices.Compact(slices.Sorted(slices.Values(ids)))
}

func (db *DB) RecordAttempts(ctx context.Context, owner string, subscriberID int64, results []plantstore.AttemptResult, lease time.Duration, release bool) (bool, error) {
	const op = "record webhook attempts"
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return false, storeError(op, err)
	}
	defer tx.Rollback()
	now := db.now()
	var delivered int64
	var last *plantstore.AttemptResult // the newest result that changed a delivery
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
	if len(done) > 0 {
		list, _ := json.Marshal(done)
		res, err := tx.ExecContext(ctx, `DELETE FROM webhook_deliveries WHERE subscriber_id = ? AND id IN (SELECT value FROM json_each(?))`,
			subscriberID, string(list))
		if err != nil {
			return false, storeError(op, err)
		}
		if delivered, err = res.RowsAffected(); err != nil {
			return false, storeError(op, err)
		}
		if delivered > 0 {
			last = &results[lastDone]
		}
	}
	for i, r := range results {
		if r.Delivered {
			continue
		}
		var failedAt sql.NullInt64
		if r.GiveUp {
			failedAt = sql.NullInt64{Int64: millis(now), Valid: true}
		}
		res, err := tx.ExecContext(ctx, `UPDATE webhook_deliveries
			SET attempts = attempts + 1, next_attempt_at = ?, last_status = ?, last_error = ?, failed_at = ?,
			    first_failed_at = coalesce(first_failed_at, ?)
			WHERE id = ? AND subscriber_id = ? AND failed_at IS NULL`,
			millis(r.NextAttempt), nullInt(r.Status), r.Error, failedAt, millis(now), r.DeliveryID, subscriberID)
		if err != nil {
			return false, storeError(op, err)
		}
		if n, _ := res.RowsAffected(); n > 0 && (last == nil || i > lastDone) {
			last = &results[i]
		}
	}
	// The newest attempt says whether the subscriber is failing.
	if last != nil {
		if last.Delivered {
			err = clearLastError(ctx, tx, subscriberID)
		} else {
			err = setLastError(ctx, tx, subscriberID, last.Error, now)
		}
		if err != nil {
			return false, storeError(op, err)
		}
	}
	if delivered > 0 {
		if _, err := tx.ExecContext(ctx, `UPDATE webhook_subscribers SET delivered = delivered + ? WHERE id = ?`, delivered, subscriberID); err != nil {
			return false, storeError(op, err)
		}
	}
	var res sql.Result
	if release {
		res, err = tx.ExecContext(ctx, `UPDATE webhook_subscribers SET lease_owner = NULL, lease_until = ?
			WHERE id = ? AND lease_owner = ?`, millis(now), subscriberID, owner)
	} else {
		res, err = tx.ExecContext(ctx, `UPDATE webhook_subscribers SET lease_until = ?
			WHERE id = ? AND lease_owner = ?`, millis(now.Add(lease)), subscriberID, owner)
	}
	if err != nil {
		return false, storeError(op, err)
	}
	held, err := res.RowsAffected()
	if err != nil {
		return false, storeError(op, err)
	}
	if err := tx.Commit(); err != nil {
		return false, storeError(op, err)
	}
	return held == 1, nil
}

func (db *DB) PauseSubscriber(ctx context.Context, owner string, subscriberID int64, until time.Time) (bool, error) {
	// A lease given back records when it may be claimed again, in
	// lease_until: here, later than now. The owner '' marks a pause, told
	// apart from a lease given back (NULL) that a listing's clock, read
	// before a release, would take for one.
	res, err := db.write.ExecContext(ctx, `UPDATE webhook_subscribers SET lease_owner = '', lease_until = ?
		WHERE id = ? AND lease_owner = ?`, millis(until), subscriberID, owner)
	if err != nil {
		return false, storeError("pause webhook subscriber", err)
	}
	held, err := res.RowsAffected()
	return held == 1, storeError("pause webhook subscriber", err)
}

func (db *DB) RetryNow(ctx context.Context, subscriberID int64) error {
	now := millis(db.now())
	_, err := db.write.ExecContext(ctx, `UPDATE webhook_deliveries SET next_attempt_at = ?1
		WHERE subscriber_id = ?2 AND failed_at IS NULL AND attempts > 0 AND next_attempt_at > ?1`, now, subscriberID)
	return storeError("retry webhook deliveries now", err)
}

func (db *DB) DisableSubscriber(ctx context.Context, id int64, reason string) error {
	const op = "disable webhook subscriber"
	// Its events not yet copied fail with the others.
	if err := db.copyWholeOutbox(ctx); err != nil {
		return storeError(op, err)
	}
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return storeError(op, err)
	}
	defer tx.Rollback()
	now := millis(db.now())
	res, err := tx.ExecContext(ctx, `UPDATE webhook_subscribers
		SET disabled_at = coalesce(disabled_at, ?1), disabled_reason = ?2, lease_owner = NULL, lease_until = NULL
		WHERE id = ?3`, now, reason, id)
	if err != nil {
		return storeError(op, err)
	}
	if err := mustHaveAffected(res, "webhook subscriber %d not found", id); err != nil {
		return err
	}
	if err := setLastError(ctx, tx, id, reason, time.UnixMilli(now)); err != nil {
		return storeError(op, err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE webhook_deliveries SET failed_at = ?, last_error = ?
		WHERE subscriber_id = ? AND failed_at IS NULL`, now, reason, id); err != nil {
		return storeError(op, err)
	}
	return storeError(op, tx.Commit())
}

// setLastError records reason, at at, as the subscriber's last error.
func setLastError(ctx context.Context, tx *sql.Tx, subscriberID int64, reason string, at time.Time) error {
	if _, err := tx.ExecContext(ctx, `UPDATE webhook_subscribers SET last_error = ? WHERE id = ?`, reason, subscriberID); err != nil {
		return err
	}
	// From the subscriber's row, so a subscriber removed meanwhile gets none.
	_, err := tx.ExecContext(ctx, `INSERT INTO webhook_subscriber_errors (subscriber_id, last_error_at)
		SELECT id, ?2 FROM webhook_subscribers WHERE id = ?1
		ON CONFLICT (subscriber_id) DO UPDATE SET last_error_at = excluded.last_error_at`, subscriberID, millis(at))
	return err
}

// clearLastError forgets the last error of a subscriber that delivered,
// unless it is disabled: then its last error is why.
func clearLastError(ctx context.Context, tx *sql.Tx, subscriberID int64) error {
	res, err := tx.ExecContext(ctx, `UPDATE webhook_subscribers SET last_error = NULL
		WHERE id = ? AND disabled_at IS NULL AND last_error IS NOT NULL`, subscriberID)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return err
	}
	_, err = tx.ExecContext(ctx, `DELETE FROM webhook_subscriber_errors WHERE subscriber_id = ?`, subscriberID)
	return err
}

func (db *DB) CountDeliveries(ctx context.Context) (plantstore.DeliveryCounts, error) {
	var c plantstore.DeliveryCounts
	err := db.read.QueryRowContext(ctx, `SELECT
			(SELECT count(*) FROM webhook_deliveries WHERE failed_at IS NULL) +
			(SELECT coalesce(sum(`+pendingInFeedSQL+`), 0) FROM webhook_subscribers s
			 LEFT JOIN webhook_subscriber_events t ON t.subscriber_id = s.id),
			(SELECT coalesce(sum(delivered), 0) FROM webhook_subscribers),
			(SELECT count(*) FROM webhook_deliveries WHERE failed_at IS NOT NULL)`).Scan(&c.Pending, &c.Delivered, &c.Failed)
	if err != nil {
		return plantstore.DeliveryCounts{}, storeError("count webhook deliveries", err)
	}
	return c, nil
}

// mustHaveAffected turns "no row changed" into ENOTFOUND.
func mustHaveAffected(res sql.Result, format string, args ...any) error {
	n, err := res.RowsAffected()
	if err != nil {
		return storeError("rows affected", err)
	}
	if n == 0 {
		return plantstore.Errorf(plantstore.ENOTFOUND, format, args...)
	}
	return nil
}

func nullInt(n int) sql.NullInt64 { return sql.NullInt64{Int64: int64(n), Valid: n != 0} }

// releaseLeases frees every subscriber lease. Only a sole server may: the
// leases of a process that died with the file (SIGKILL, a crash) are
// then taken over at once instead of when they run out.
func (db *DB) releaseLeases(ctx context.Context) error {
	_, err := db.write.ExecContext(ctx, `UPDATE webhook_subscribers SET lease_owner = NULL, lease_until = NULL WHERE lease_owner <> ''`)
	return storeError("release webhook leases", err)
}
