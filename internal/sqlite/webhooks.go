package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"time"

	"github.com/plantstore/plantstore"
)

var _ plantstore.WebhookStore = (*DB)(nil)

// enqueueEvents writes the outbox rows for the plants of batch that results
// mark created, in the batch's transaction: one row per active subscriber.
// It reports whether it wrote any. With no active subscriber it costs one
// small read per batch.
func enqueueEvents(c *rawConn, batch []*writeRequest, results []writeResult, now int64) (bool, error) {
	var active bool
	err := c.query(anySubscriberSQL, nil, func(v []driver.Value) bool {
		active = v[0].(int64) != 0
		return false
	})
	if err != nil || !active {
		return false, err
	}
	for i, req := range batch {
		if !results[i].created {
			continue
		}
		p := req.plant
		if _, err := c.exec(enqueueSQL, plantstore.NewEventID(), p.ID, p.Name, p.Tag, now); err != nil {
			return false, err
		}
	}
	return true, nil
}

const (
	anySubscriberSQL = `SELECT EXISTS (SELECT 1 FROM webhook_subscribers WHERE disabled_at IS NULL)`
	enqueueSQL       = `INSERT INTO webhook_deliveries (subscriber_id, event_id, plant_id, name, tag, created_at, next_attempt_at)
		SELECT id, ?1, ?2, ?3, ?4, ?5, ?5 FROM webhook_subscribers WHERE disabled_at IS NULL ORDER BY id`
)

func (db *DB) AddSubscriber(ctx context.Context, url, secret string) (plantstore.Subscriber, error) {
	s := plantstore.Subscriber{URL: url, Secret: secret, CreatedAt: db.now().UTC().Truncate(time.Millisecond)}
	err := db.write.QueryRowContext(ctx, `INSERT INTO webhook_subscribers (url, secret, created_at) VALUES (?, ?, ?) RETURNING id`,
		url, secret, millis(s.CreatedAt)).Scan(&s.ID)
	if err != nil {
		return plantstore.Subscriber{}, storeError("add webhook subscriber", err)
	}
	return s, nil
}

func (db *DB) Subscribers(ctx context.Context) ([]plantstore.Subscriber, error) {
	rows, err := db.read.QueryContext(ctx, `SELECT s.id, s.url, s.created_at, s.disabled_at, s.disabled_reason, s.delivered, s.last_error, e.last_error_at,
			(SELECT count(*) FROM webhook_deliveries d WHERE d.subscriber_id = s.id AND d.failed_at IS NULL),
			(SELECT count(*) FROM webhook_deliveries d WHERE d.subscriber_id = s.id AND d.failed_at IS NOT NULL)
		FROM webhook_subscribers s LEFT JOIN webhook_subscriber_errors e ON e.subscriber_id = s.id ORDER BY s.id`)
	if err != nil {
		return nil, storeError("list webhook subscribers", err)
	}
	defer rows.Close()
	var subs []plantstore.Subscriber
	for rows.Next() {
		var s plantstore.Subscriber
		var created int64
		var disabled, lastErrorAt sql.NullInt64
		var reason, lastError sql.NullString
		if err := rows.Scan(&s.ID, &s.URL, &created, &disabled, &reason, &s.Delivered, &lastError, &lastErrorAt, &s.Pending, &s.Failed); err != nil {
			return nil, storeError("list webhook subscribers", err)
		}
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

func (db *DB) ClaimSubscribers(ctx context.Context, owner string, lease time.Duration, n int) ([]plantstore.Subscriber, error) {
	now := db.now()
	rows, err := db.write.QueryContext(ctx, `UPDATE webhook_subscribers SET lease_owner = ?1, lease_until = ?2
		WHERE id IN (
			SELECT s.id FROM webhook_subscribers s
			WHERE s.disabled_at IS NULL AND (s.lease_until IS NULL OR s.lease_until <= ?3)
			  AND (SELECT d.next_attempt_at FROM webhook_deliveries d
			       WHERE d.subscriber_id = s.id AND d.failed_at IS NULL ORDER BY d.id LIMIT 1) <= ?3
			ORDER BY s.id LIMIT ?4)
		RETURNING id, url, secret`, owner, millis(now.Add(lease)), millis(now), n)
	if err != nil {
		return nil, storeError("claim webhook subscribers", err)
	}
	defer rows.Close()
	var subs []plantstore.Subscriber
	for rows.Next() {
		var s plantstore.Subscriber
		if err := rows.Scan(&s.ID, &s.URL, &s.Secret); err != nil {
			return nil, storeError("claim webhook subscribers", err)
		}
		subs = append(subs, s)
	}
	return subs, storeError("claim webhook subscribers", rows.Err())
}

func (db *DB) DueDeliveries(ctx context.Context, subscriberID int64, n int) ([]plantstore.Delivery, error) {
	rows, err := db.read.QueryContext(ctx, `SELECT id, event_id, plant_id, name, tag, created_at, attempts, next_attempt_at
		FROM webhook_deliveries WHERE subscriber_id = ? AND failed_at IS NULL ORDER BY id LIMIT ?`, subscriberID, n)
	if err != nil {
		return nil, storeError("read webhook deliveries", err)
	}
	defer rows.Close()
	now := millis(db.now())
	var ds []plantstore.Delivery
	for rows.Next() {
		d := plantstore.Delivery{SubscriberID: subscriberID}
		var tag sql.NullString
		var created, next int64
		if err := rows.Scan(&d.ID, &d.EventID, &d.Plant.ID, &d.Plant.Name, &tag, &created, &d.Attempts, &next); err != nil {
			return nil, storeError("read webhook deliveries", err)
		}
		if len(ds) == 0 && next > now {
			return nil, nil // the head is not due; the rest wait behind it
		}
		if tag.Valid {
			d.Plant.Tag = &tag.String
		}
		d.CreatedAt = time.UnixMilli(created).UTC()
		ds = append(ds, d)
	}
	return ds, storeError("read webhook deliveries", rows.Err())
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
	for i, r := range results {
		var res sql.Result
		var err error
		switch {
		case r.Delivered:
			res, err = tx.ExecContext(ctx, `DELETE FROM webhook_deliveries WHERE id = ? AND subscriber_id = ?`, r.DeliveryID, subscriberID)
		default:
			var failedAt sql.NullInt64
			if r.GiveUp {
				failedAt = sql.NullInt64{Int64: millis(now), Valid: true}
			}
			res, err = tx.ExecContext(ctx, `UPDATE webhook_deliveries
				SET attempts = attempts + 1, next_attempt_at = ?, last_status = ?, last_error = ?, failed_at = ?
				WHERE id = ? AND subscriber_id = ? AND failed_at IS NULL`,
				millis(r.NextAttempt), nullInt(r.Status), r.Error, failedAt, r.DeliveryID, subscriberID)
		}
		if err != nil {
			return false, storeError(op, err)
		}
		if n, _ := res.RowsAffected(); n > 0 {
			last = &results[i]
			if r.Delivered {
				delivered += n
			}
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
		res, err = tx.ExecContext(ctx, `UPDATE webhook_subscribers SET lease_owner = NULL, lease_until = NULL
			WHERE id = ? AND lease_owner = ?`, subscriberID, owner)
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

func (db *DB) DisableSubscriber(ctx context.Context, id int64, reason string) error {
	const op = "disable webhook subscriber"
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
			(SELECT count(*) FROM webhook_deliveries WHERE failed_at IS NULL),
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
	_, err := db.write.ExecContext(ctx, `UPDATE webhook_subscribers SET lease_owner = NULL, lease_until = NULL WHERE lease_owner IS NOT NULL`)
	return storeError("release webhook leases", err)
}
