package postgres_test

import (
	"context"
	"errors"
	"log/slog"
	neturl "net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/apitest"
	"github.com/plantstore/plantstore/internal/postgres"
	"github.com/plantstore/plantstore/internal/postgres/pgtest"
)

// leap is how far past the last id it knows a database on a new timeline
// takes its event ids (lostEventIDs).
const leap = 1_000_000_000

const timelineWarning = `"level":"WARN","msg":"the database is on another timeline than the change feed's last write`

// TestFailoverThatLostCommits runs the failover docs/postgres.md warns of,
// on real servers: a streaming standby stops receiving, the primary takes
// more changes (their event ids seen by a follower), then dies; the
// standby, promoted, lacks those changes. The promoted database must not
// give those ids again to other changes: a follower that saw them gets
// 410, and the feed goes on a leap further.
func TestFailoverThatLostCommits(t *testing.T) {
	ctx := context.Background()
	primary := pgtest.StartServer(t)
	standby := primary.StartStandby()

	db, err := postgres.Open(ctx, primary.URL(), postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	createPlants(t, db, 1, 4, "Fern")
	if err := db.DeletePlant(ctx, 2, nil); err != nil {
		t.Fatal(err)
	}
	kept := latestEvent(t, db) // 5: on the standby too, once replayed
	waitForEvent(t, standby.URL(), kept)

	// The standby stops receiving; the primary goes on, and a follower
	// reads what it gives.
	standby.Stop()
	if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: 10, Name: "Lost"}); err != nil {
		t.Fatal(err)
	}
	if err := db.DeletePlant(ctx, 3, nil); err != nil {
		t.Fatal(err)
	}
	seen := latestEvent(t, db)
	if seen != kept+2 {
		t.Fatalf("the primary's newest event is %d, want %d", seen, kept+2)
	}
	db.Close()
	primary.Crash()
	standby.Start()
	// An instance given the standby before its promotion (as one on a
	// URL that does not follow the promotion): its sessions were opened
	// in recovery, and it is the first to write once the standby takes
	// writes.
	var earlyLogs apitest.Buffer
	early, err := postgres.Open(ctx, standby.URL(), postgres.Options{Logger: slog.New(slog.NewJSONHandler(&earlyLogs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer early.Close()
	// Still a standby: a write is refused as one that may pass (503), not
	// as an internal error of the timeline's function, which a standby
	// refuses too.
	if _, err := early.CreatePlant(ctx, plantstore.Plant{ID: 12, Name: "Refused"}); plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE || !strings.Contains(err.Error(), "25006") ||
		plantstore.ErrorMessage(err) != "the store takes no writes now (its database is read-only)" {
		t.Fatalf("a create on the standby: %v (the client reads %q), want EUNAVAILABLE saying the database is read-only (25006)", err, plantstore.ErrorMessage(err))
	}
	standby.Promote()

	var logs apitest.Buffer
	db, err = postgres.Open(ctx, standby.URL(), postgres.Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if !strings.Contains(logs.String(), timelineWarning) || !strings.Contains(logs.String(), `"timeline":"00000002","last_write_timeline":"00000001"`) {
		t.Errorf("an instance started on the promoted standby logged\n%s\nwant %s…, from timeline 1 to 2", logs.String(), timelineWarning)
	}
	// What the failover lost: the create of 10 and the delete of 3.
	if _, err := db.GetPlant(ctx, 10); plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
		t.Fatalf("plant 10 on the promoted standby: %v; the test meant it lost", err)
	}
	if _, err := db.GetPlant(ctx, 3); err != nil {
		t.Fatalf("plant 3 on the promoted standby: %v; the test meant its delete lost", err)
	}

	// Before any write, followers are told to resync already, and the
	// newest id reads as past the leap the first write will take: a
	// follower that resyncs now is not told again by that write.
	resynced := checkFeedPastLeap(t, db, seen, kept+leap)

	// The next change takes an id a leap past the last the standby knew,
	// never one the follower saw for another change.
	// Its sessions of the recovery may answer 503 once, as read-only.
	createOnceWritable(t, early, plantstore.Plant{ID: 11, Name: "After"})
	if got, want := latestEvent(t, db), kept+leap+1; got != want {
		t.Fatalf("the first change on the promoted standby took event id %d, want %d", got, want)
	}
	if !strings.Contains(earlyLogs.String(), `"level":"WARN","msg":"this write took its event ids a leap further on`) {
		t.Errorf("the instance whose write leapt logged\n%s\nwant a warning of the leap", earlyLogs.String())
	}
	if err := db.DeletePlant(ctx, 4, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := latestEvent(t, db), kept+leap+2; got != want {
		t.Fatalf("the second change took event id %d, want %d: one leap, not one a write", got, want)
	}
	// The follower that saw the lost ids is told to resync, as is one
	// that saw only what the standby kept: the feed cannot tell them apart.
	for _, after := range []int64{seen, kept, 0} {
		_, err := db.Events(ctx, plantstore.EventQuery{After: after, Limit: 10})
		if plantstore.ErrorCode(err) != plantstore.EGONE || !strings.Contains(err.Error(), "may be lost: the database was replaced") {
			t.Errorf("events after %d: %v, want EGONE saying the failover may have lost them", after, err)
		}
	}
	oldest, err := db.Events(ctx, plantstore.EventQuery{FromOldest: true, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(oldest) != 2 || oldest[0].ID != kept+leap+1 || oldest[0].Plant.ID != 11 || oldest[1].ID != kept+leap+2 || oldest[1].Type != plantstore.EventDeleted {
		t.Errorf("the oldest events after the failover: %+v, want the create of 11 and the delete of 4", oldest)
	}
	if evs, err := db.Events(ctx, plantstore.EventQuery{After: resynced, Limit: 10}); err != nil || len(evs) != 2 {
		t.Errorf("events after %d, where a follower resynced before the first write: %+v, %v; want the two changes since", resynced, evs, err)
	}
	// A follower that resynced reads on from the newest id as usual.
	if evs, err := db.Events(ctx, plantstore.EventQuery{After: kept + leap + 1, Limit: 10}); err != nil || len(evs) != 1 || evs[0].ID != kept+leap+2 {
		t.Errorf("events after %d: %+v, %v; want the delete of 4", kept+leap+1, evs, err)
	}
	// An instance started now finds the timeline recorded, and says nothing.
	var second apitest.Buffer
	db2, err := postgres.Open(ctx, standby.URL(), postgres.Options{Logger: slog.New(slog.NewJSONHandler(&second, nil))})
	if err != nil {
		t.Fatal(err)
	}
	db2.Close()
	if strings.Contains(second.String(), "timeline") {
		t.Errorf("an instance started after the first write on the new timeline logged\n%s", second.String())
	}
}

// latestEvent is db's newest event id.
func latestEvent(t *testing.T, db *postgres.DB) int64 {
	t.Helper()
	id, err := db.LatestEventID(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// checkFeedPastLeap checks that db's feed, before the first write on a
// database that lost commits, reads as past the leap that write will take:
// a follower after seen (an id lost) gets EGONE saying so, once the
// database answers, and the newest id reads leapt. It returns that id,
// where a follower resyncs.
func checkFeedPastLeap(t *testing.T, db *postgres.DB, seen, leapt int64) int64 {
	t.Helper()
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err = db.Events(context.Background(), plantstore.EventQuery{After: seen, Limit: 10}); plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE {
			break
		}
	}
	if plantstore.ErrorCode(err) != plantstore.EGONE || !strings.Contains(err.Error(), "may be lost") {
		t.Errorf("events after %d before the first write: %v, want EGONE saying they may be lost", seen, err)
	}
	latest := latestEvent(t, db)
	if latest != leapt {
		t.Errorf("before the first write, the newest event id reads %d, want %d", latest, leapt)
	}
	return latest
}

// createPlants creates plants first to last, each named name.
func createPlants(t *testing.T, db *postgres.DB, first, last int64, name string) {
	t.Helper()
	for id := first; id <= last; id++ {
		if _, err := db.CreatePlant(context.Background(), plantstore.Plant{ID: id, Name: name}); err != nil {
			t.Fatal(err)
		}
	}
}

// createOnceWritable creates p through db once the database it follows
// takes writes: its answers are 503 until then, for at most 10 s.
func createOnceWritable(t *testing.T, db *postgres.DB, p plantstore.Plant) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err = db.CreatePlant(context.Background(), p); plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE {
			break
		}
	}
	if err != nil {
		t.Fatalf("create plant %d once the database takes writes: %v", p.ID, err)
	}
}

// waitForEvent waits until the standby at url has replayed event id.
func waitForEvent(t *testing.T, url string, id int64) {
	t.Helper()
	conn := connect(t, url)
	deadline := time.Now().Add(20 * time.Second)
	for {
		var last int64
		err := conn.QueryRow(context.Background(), `SELECT last FROM event_counter`).Scan(&last)
		// Until the standby has replayed the schema, the table is not
		// there (undefined_table): nothing replayed yet, not a failure.
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); err != nil && (!ok || pgErr.Code != "42P01") {
			t.Fatal(err)
		}
		if last >= id {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the standby replayed up to event %d in 20 s, want %d", last, id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestOneLeapWhateverTheWriters: writes of two instances racing on a
// database whose last write was on another timeline leap once between
// them, and the ids after the leap follow each other.
func TestOneLeapWhateverTheWriters(t *testing.T) {
	ctx := context.Background()
	a, url := openTest(t)
	if _, err := a.CreatePlant(ctx, plantstore.Plant{ID: 1, Name: "Fern"}); err != nil {
		t.Fatal(err)
	}
	// As on a promoted standby: the last write was on another timeline.
	sqlRunner(t, url)(`UPDATE event_counter SET timeline = 'FFFFFFFF'`)
	b, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const writes = 40
	var wg sync.WaitGroup
	errs := make(chan error, writes)
	for i := range writes {
		db := a
		if i%2 == 1 {
			db = b
		}
		wg.Go(func() {
			id := int64(100 + i)
			if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: id, Name: "Fern"}); err != nil {
				errs <- err
				return
			}
			if i%4 == 0 {
				if err := db.UpdatePlant(ctx, plantstore.Plant{ID: id, Name: "Renamed"}, nil); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	changes := writes + writes/4
	if got, want := latestEvent(t, a), int64(1+leap+changes); got != want {
		t.Fatalf("after %d changes racing past the timeline's change, the newest event is %d, want %d (one leap)", changes, got, want)
	}
	evs, err := a.Events(ctx, plantstore.EventQuery{FromOldest: true, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != changes {
		t.Fatalf("%d events from the oldest kept, want %d", len(evs), changes)
	}
	for i, e := range evs {
		if want := int64(1 + leap + 1 + i); e.ID != want {
			t.Fatalf("event %d of the feed has id %d, want %d", i, e.ID, want)
		}
	}
}

// TestNoTimelineFunction: where the server refuses the function that
// tells its timeline (as some services built on PostgreSQL lack it), the
// start says a failover goes unnoticed, and writes and the feed work as
// before.
func TestNoTimelineFunction(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	role, roleURL := newRole(t, url, "plantstore_no_timeline")
	inDB := sqlRunner(t, url)
	inDB("GRANT ALL ON SCHEMA public TO " + role)
	inDB("REVOKE EXECUTE ON FUNCTION pg_walfile_name(pg_lsn) FROM PUBLIC")

	var logs apitest.Buffer
	db, err := postgres.Open(ctx, roleURL, postgres.Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	const warning = `"level":"WARN","msg":"the database cannot tell its timeline, so a failover to a standby that lacks the last commits goes unnoticed`
	if !strings.Contains(logs.String(), warning) || !strings.Contains(logs.String(), "permission denied for function pg_walfile_name") {
		t.Errorf("an instance that may not read the timeline logged\n%s\nwant %s…", logs.String(), warning)
	}
	createPlants(t, db, 1, 3, "Fern")
	if err := db.DeletePlant(ctx, 2, nil); err != nil {
		t.Fatal(err)
	}
	if err := db.UpdatePlant(ctx, plantstore.Plant{ID: 3, Name: "Renamed"}, nil); err != nil {
		t.Fatal(err)
	}
	evs, err := db.Events(ctx, plantstore.EventQuery{Limit: 10})
	if err != nil || len(evs) != 5 || evs[4].ID != 5 {
		t.Fatalf("the feed: %+v, %v; want events 1 to 5", evs, err)
	}
}

// TestStandbyStartedAsPrimary: a standby made the primary without a
// promotion (standby.signal removed) keeps the timeline, so the timeline
// cannot tell that it lacks the old primary's last commits; an instance
// that lived through it can, having seen ids past the counter, and its
// first write leaps.
func TestStandbyStartedAsPrimary(t *testing.T) {
	ctx := context.Background()
	primary := pgtest.StartServer(t)
	standby := primary.StartStandby()
	// One instance on both hosts, as docs/postgres.md advises: it follows
	// whichever takes writes.
	both, err := neturl.Parse(primary.URL())
	if err != nil {
		t.Fatal(err)
	}
	other, err := neturl.Parse(standby.URL())
	if err != nil {
		t.Fatal(err)
	}
	both.Host += "," + other.Host
	q := both.Query()
	q.Set("target_session_attrs", "read-write")
	both.RawQuery = q.Encode()
	var logs apitest.Buffer
	db, err := postgres.Open(ctx, both.String(), postgres.Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	createPlants(t, db, 1, 3, "Fern")
	kept := latestEvent(t, db)
	waitForEvent(t, standby.URL(), kept)
	standby.Stop()
	createPlants(t, db, 10, 12, "Lost")
	seen := latestEvent(t, db)
	primary.Crash()
	standby.StartAsPrimary()

	// Before any write, the instance's feed reads as past the leap the
	// first write will take: a follower that resyncs now does so once.
	resynced := checkFeedPastLeap(t, db, seen, kept+leap)
	createOnceWritable(t, db, plantstore.Plant{ID: 20, Name: "After"})
	if got, want := latestEvent(t, db), kept+leap+1; got != want {
		t.Fatalf("the first change after the standby took writes took event id %d, want %d: a leap past the standby's %d, and so past the ids the instance saw (%d)", got, want, kept, seen)
	}
	if evs, err := db.Events(ctx, plantstore.EventQuery{After: resynced, Limit: 10}); err != nil || len(evs) != 1 {
		t.Errorf("events after %d, where a follower resynced before the first write: %+v, %v; want the create since", resynced, evs, err)
	}
	if !strings.Contains(logs.String(), `"level":"WARN","msg":"this write took its event ids a leap further on`) {
		t.Errorf("the instance logged\n%s\nwant a warning of the leap", logs.String())
	}
	if _, err := db.Events(ctx, plantstore.EventQuery{After: seen, Limit: 10}); plantstore.ErrorCode(err) != plantstore.EGONE {
		t.Errorf("events after %d, an id the standby never had: %v, want EGONE", seen, err)
	}
}
