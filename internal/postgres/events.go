package postgres

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/faultlog"
)

// The change feed. Each write statement that changes plants records their
// events in the same statement, so in the same transaction (plants.go,
// batch.go).
//
// Event ids must become visible in id order: a follower that has read
// event 12 must never later find an event 11. PostgreSQL does not promise
// that of a sequence: two transactions can take 11 and 12 and commit 12
// first, and a reader between the two commits sees 12 without 11. So ids
// come from the one row of event_counter, which each write updates as its
// last step, taking the row's lock, and holds until it commits. The next
// writer waits there, and reads the counter only once the previous one has
// committed and is visible (PostgreSQL releases a transaction's locks after
// it marks it committed). Ids are then handed out in commit order, by every
// instance on the database, and a reader whose snapshot holds event N holds
// every event before it.
//
// The price is that writes that record events commit one at a time, each
// holding the lock through its commit's WAL flush; the batched creates
// (batch.go) put many plants in each commit, so the feed costs them little
// (BENCHMARKS.md).
//
// Each such write also notifies eventsChannel, and every instance's
// listener (Options.EventsWritten) wakes its followers at once.

// eventsChannel is the LISTEN/NOTIFY channel writes notify when they record
// events; the payload is the newest event id.
const eventsChannel = "plantstore_events"

// takeEventIDs is the WITH clause "counter" of the statements that record
// events: it takes one event id for each row of their clause "changed"
// (the plants inserted, updated or deleted), and returns the last one
// taken. It takes the counter's lock only when some row changed, so a
// write that changes nothing waits for no one. The count makes "changed"
// run to its end before the lock is taken: the write holds every plant it
// changes before it queues for the counter, so two writes cannot each hold
// what the other waits for.
//
// It also notices a failover or a restore that lost commits. A standby
// promoted after its primary died may lack the primary's last commits, and
// with them the last event ids the primary gave: followers and webhook
// receivers have seen ids the promoted database would give again, to other
// changes. Two signs tell such a database: a promotion (and a
// point-in-time recovery) starts a new timeline, and the counter keeps the
// timeline of the write that last took ids; and an instance that lived
// through it has seen ids (its own writes', and the notifications of
// others') past the counter, which never goes back otherwise (the
// parameter seen: a standby started as a primary without a promotion, a
// file-system snapshot restored, keep the timeline). The first write that
// finds either takes its ids a leap (lostEventIDs) past the counter, past
// any id the lost commits can have taken, and sets lost_through to the
// leap's end: the feed reads as pruned up to
// there, and followers get 410 and resync (eventsSQL). Taking ids and
// looking for the signs in one statement, under the counter's lock,
// leaves no window for a write to slip between them. A planned switchover
// starts a timeline too and costs the followers one resync. The clause
// returns the last id taken, and whether this write leapt (lost_through
// is then where its ids start).
func takeEventIDs(seen string) string {
	last, lostThrough := afterLeap(seen)
	return `counter AS (
		UPDATE event_counter k SET
			last = ` + last + ` + (SELECT count(*) FROM changed),
			lost_through = ` + lostThrough + `,
			timeline = coalesce(w.timeline, k.timeline)
		FROM (SELECT ` + currentTimeline + ` AS timeline) w
		WHERE (SELECT count(*) FROM changed) > 0
		RETURNING k.last, k.lost_through > 0 AND k.lost_through = k.last - (SELECT count(*) FROM changed) AS leapt
	)`
}

// afterLeap is the counter's row k (last, lost_through) as it stands once
// the leap is taken when one is due (takeEventIDs), and as it is when
// none is: w.timeline is the server's timeline, seen the parameter of the
// newest id this instance saw.
func afterLeap(seen string) (last, lostThrough string) {
	due := `(k.timeline <> w.timeline OR k.last < ` + seen + `::bigint)`
	return `CASE WHEN ` + due + ` THEN k.last + ` + lostEventIDs + ` ELSE k.last END`,
		`CASE WHEN ` + due + ` THEN k.last + ` + lostEventIDs + ` ELSE k.lost_through END`
}

// lostEventIDs is how far past the last id it knows a database on a new
// timeline starts giving event ids: more than any standby's lag can hold
// (a billion changes), and small enough that ids stay exact in a
// JavaScript number (below 2^53) for millions of failovers.
const lostEventIDs = `1000000000`

// currentTimeline is the timeline PostgreSQL writes its WAL on: the first
// eight hex digits of the current WAL file's name. It fails on a standby,
// where a write fails first anyway (read-only). Where the server has no
// such function (some services built on PostgreSQL), the statements use
// NULL instead (withoutTimeline) and no failover is noticed.
const currentTimeline = `substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)`

// timelineStatements are the statements that read the timeline (those
// that take event ids, and those that read the counter for followers), as
// one database runs them: DB.sql, chosen once at the start
// (checkTimeline).
type timelineStatements struct {
	insertPlants, insertPlant, updatePlant, deletePlant, events, latestEvent string
}

var (
	withTimeline = timelineStatements{
		insertPlants: insertPlantsSQL, insertPlant: insertPlantSQL, updatePlant: updatePlantSQL,
		deletePlant: deletePlantSQL, events: eventsSQL, latestEvent: latestEventSQL,
	}
	// withoutTimeline is for a server that cannot tell its timeline: NULL
	// in its place, so no failover is noticed.
	withoutTimeline = func(s timelineStatements) timelineStatements {
		for _, stmt := range []*string{&s.insertPlants, &s.insertPlant, &s.updatePlant, &s.deletePlant, &s.events, &s.latestEvent} {
			*stmt = strings.Replace(*stmt, currentTimeline, "NULL::text", 1)
		}
		return s
	}(withTimeline)
)

// notifyEvents is the last two columns of the statements that record
// events: the id of the last event recorded, NULL when none, with a
// notification of it to the followers of every instance; and whether the
// write leapt (takeEventIDs), NULL when it recorded none.
const notifyEvents = `(SELECT c.last FROM counter c, pg_notify('` + eventsChannel + `', c.last::text)), (SELECT c.leapt FROM counter c)`

// recordedEvents is what a write statement says of the events it recorded
// (notifyEvents): the last one's id, nil when none, and whether the write
// leapt (takeEventIDs).
type recordedEvents struct {
	last  *int64
	leapt *bool
}

// recorded tells this instance's followers that the events a write
// recorded have committed, and says when the write leapt.
func (db *DB) recorded(ev recordedEvents) {
	if ev.last == nil {
		return
	}
	db.saw(*ev.last)
	if ev.leapt != nil && *ev.leapt {
		db.log.Warn("this write took its event ids a leap further on: the database is on another timeline than the last write, or behind ids this instance saw (a failover, or a restore, that lost changes); clients following the feed get 410 and resync",
			"event_id", *ev.last, "leap", lostEventIDs)
	}
	if db.eventsWritten != nil {
		db.eventsWritten()
	}
}

// saw records that event id was given: the counter, which never goes
// back, has reached it (takeEventIDs' parameter seen).
func (db *DB) saw(id int64) {
	for {
		seen := db.seen.Load()
		if id <= seen || db.seen.CompareAndSwap(seen, id) {
			return
		}
	}
}

// counterSQL reads the counter as followers see it: the last id given,
// and the horizon of the ids lost (lost_through). On a database that the
// next write will find changed (takeEventIDs: another timeline, or behind
// the parameter seen, the ids this instance saw), both are read as that
// write will leave them, past the leap, so that a follower told to resync
// now is not told again by that write. A standby, where the timeline
// cannot be read, is read as it is.
func counterSQL(seen string) string {
	last, lostThrough := afterLeap(seen)
	return `counter AS (
		SELECT ` + last + ` AS last, ` + lostThrough + ` AS lost_through
		FROM event_counter k, (SELECT CASE WHEN pg_is_in_recovery() THEN NULL ELSE ` + currentTimeline + ` END AS timeline) w
	)`
}

// eventsSQL reads the horizon (past the events pruned, and those a
// failover lost: counterSQL), the last event id given and one page of
// events in one statement, so from one snapshot: a prune cannot come
// between them and hide a gap. The horizon and the last id come back on
// every row, and alone (with NULL event fields) when no event follows $1
// (or the horizon, when $4). $5 is the newest id this instance saw.
var eventsSQL = `WITH ` + counterSQL("$5") + `
	SELECT h.pruned_through, c.lost_through, c.last, e.id, e.type, e.plant_id, e.name, e.tag, e.at
	FROM event_horizon h CROSS JOIN counter c LEFT JOIN LATERAL (
		SELECT id, type, plant_id, name, tag, at FROM events
		WHERE id > CASE WHEN $4::boolean THEN greatest(h.pruned_through, c.lost_through) ELSE $1 END AND (cardinality($3::text[]) = 0 OR type = ANY($3::text[]))
		ORDER BY id LIMIT $2
	) e ON true
	ORDER BY e.id`

func (db *DB) Events(ctx context.Context, q plantstore.EventQuery) ([]plantstore.Event, error) {
	if q.Limit < 1 {
		return nil, plantstore.Errorf(plantstore.EINVALID, "event limit %d: must be 1 or more", q.Limit)
	}
	types := q.Types
	if types == nil {
		types = []string{}
	}
	rows, err := db.pool.Query(ctx, db.sql.events, q.After, q.Limit, types, q.FromOldest, db.seen.Load())
	if err != nil {
		return nil, db.storeError("read events", err)
	}
	events := make([]plantstore.Event, 0, min(q.Limit, 1024))
	var pruned, lost, latest int64
	var id, plantID *int64
	var typ, name *string
	var tag *string
	var at *time.Time
	_, err = pgx.ForEachRow(rows, []any{&pruned, &lost, &latest, &id, &typ, &plantID, &name, &tag, &at}, func() error {
		if id == nil {
			return nil
		}
		events = append(events, plantstore.Event{
			ID:    *id,
			Type:  *typ,
			At:    at.UTC(),
			Plant: plantstore.Plant{ID: *plantID, Name: *name, Tag: tag},
		})
		tag = nil // a fresh pointer for the next row's tag
		return nil
	})
	if err != nil {
		return nil, db.storeError("read events", err)
	}
	switch {
	case q.FromOldest:
	case q.After < lost && lost >= pruned:
		return nil, plantstore.EventsLost(q.After, lost)
	case q.After < pruned:
		return nil, plantstore.EventsGone(q.After, pruned)
	case q.After > latest:
		return nil, plantstore.EventsAhead(q.After, latest)
	}
	return events, nil
}

// latestEventSQL reads the last event id given, as followers see it
// (counterSQL).
var latestEventSQL = `WITH ` + counterSQL("$1") + ` SELECT last FROM counter`

func (db *DB) LatestEventID(ctx context.Context) (int64, error) {
	var id int64
	if err := db.pool.QueryRow(ctx, db.sql.latestEvent, db.seen.Load()).Scan(&id); err != nil {
		return 0, db.storeError("read the latest event id", err)
	}
	return id, nil
}

// pruneChunk bounds one prune transaction.
const pruneChunk = 1000

// PruneEvents deletes, oldest first, the events recorded before cutoff,
// stopping at the first that is not: ids increase with time but clocks
// differ between instances and can step back, and the feed must stay
// whole after its horizon.
func (db *DB) PruneEvents(ctx context.Context, cutoff time.Time) (int, error) {
	pruned := 0
	for {
		var n int
		var done bool
		err := retry(ctx, func(ctx context.Context) error {
			return pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) (err error) {
				n, done, err = pruneSome(ctx, tx, cutoff)
				return err
			})
		})
		if err != nil {
			return pruned, db.storeError("prune events", err)
		}
		pruned += n
		if done {
			return pruned, nil
		}
	}
}

// pruneSome deletes the oldest events recorded before cutoff, up to
// pruneChunk of them, and moves the horizon past them. done is false when
// there may be more.
func pruneSome(ctx context.Context, tx pgx.Tx, cutoff time.Time) (n int, done bool, err error) {
	// The horizon's row lock makes concurrent prunes (of several
	// instances) take turns.
	if _, err := tx.Exec(ctx, `SELECT pruned_through FROM event_horizon FOR UPDATE`); err != nil {
		return 0, false, err
	}
	rows, err := tx.Query(ctx, `SELECT id, at FROM events ORDER BY id LIMIT $1`, pruneChunk)
	if err != nil {
		return 0, false, err
	}
	var last, id int64
	var at time.Time
	seen := 0
	_, err = pgx.ForEachRow(rows, []any{&id, &at}, func() error {
		seen++
		if at.Before(cutoff) && n == seen-1 {
			last, n = id, n+1
		}
		return nil
	})
	if err != nil {
		return 0, false, err
	}
	if n == 0 {
		return 0, true, nil
	}
	if _, err := tx.Exec(ctx, `DELETE FROM events WHERE id <= $1`, last); err != nil {
		return 0, false, err
	}
	// Never lowered: after a restore it may be past every event kept
	// (docs/operations.md, "On PostgreSQL").
	if _, err := tx.Exec(ctx, `UPDATE event_horizon SET pruned_through = greatest(pruned_through, $1)`, last); err != nil {
		return 0, false, err
	}
	return n, n < seen || seen < pruneChunk, nil
}

// listen wakes this instance's followers (Options.EventsWritten) when any
// instance records events: it holds one connection of its own, LISTENing
// on eventsChannel, until ctx ends, and reconnects after a failure. While
// it is not listening, notifications are lost, so each (re)connection
// also wakes the followers once, and they read what they missed.
func (db *DB) listen(ctx context.Context) {
	// Said once a minute while the database is away, not every retry.
	faults := &faultlog.Task{Log: db.log, Msg: "listening for events from other instances failed; followers wait for their next poll, or for listening again to work (each reconnection wakes them)"}
	for ctx.Err() == nil {
		err := db.listenOnce(ctx, faults.Worked)
		if ctx.Err() != nil {
			return
		}
		faults.Failed(db.storeError("listen", err), "retry_in", listenRetry.String())
		select {
		case <-ctx.Done():
		case <-time.After(listenRetry):
		}
	}
}

// listenRetry is the pause before listening again after a failure.
const listenRetry = 2 * time.Second

// listenOnce listens until it fails; it calls listening once it does.
func (db *DB) listenOnce(ctx context.Context, listening func()) error {
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The connection is ours for good: a pooled one would take the LISTEN
	// to whoever borrows it next.
	c := conn.Hijack()
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, `LISTEN `+eventsChannel); err != nil {
		return err
	}
	listening()
	db.eventsWritten()
	for {
		n, err := c.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		// The payload is the newest id, written by any instance.
		if id, err := strconv.ParseInt(n.Payload, 10, 64); err == nil {
			db.saw(id)
		}
		db.eventsWritten()
	}
}
