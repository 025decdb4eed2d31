package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/plantstore/plantstore"
)

// benchPlants is the size of the store the list benchmarks read.
const benchPlants = 1_000_000

var (
	benchOnce sync.Once
	benchDB   *DB
	benchErr  error
)

// openBenchStore builds, once per run, a store of a million plants: ids 1
// to 1,000,000, every other one tagged with one of ten tags, so a tag
// holds 50,000 plants spread over the whole id range.
func openBenchStore(b *testing.B) *DB {
	b.Helper()
	benchOnce.Do(func() {
		dir, err := os.MkdirTemp("", "plantstore-bench")
		if err != nil {
			benchErr = err
			return
		}
		db, err := Open(context.Background(), filepath.Join(dir, "bench.db"), Options{})
		if err != nil {
			benchErr = err
			return
		}
		benchErr = fill(db, benchPlants)
		benchDB = db
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return benchDB
}

func fill(db *DB, n int) error {
	const batch = 20_000
	for start := 1; start <= n; start += batch {
		tx, err := db.write.Begin()
		if err != nil {
			return err
		}
		stmt, err := tx.Prepare(`INSERT INTO plants (id, name, tag, created_at) VALUES (?, ?, ?, 0)`)
		if err != nil {
			return err
		}
		for id := start; id < start+batch && id <= n; id++ {
			var tag any
			if id%2 == 0 {
				tag = fmt.Sprintf("tag-%d", id/2%10)
			}
			if _, err := stmt.Exec(id, fmt.Sprintf("plant number %d", id), tag); err != nil {
				return err
			}
		}
		stmt.Close()
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// BenchmarkListPage reads a page of 100 at the start of the table (the
// baseline) and at its end, unfiltered and by tag. Keyset paging makes the
// end cost what the start costs.
func BenchmarkListPage(b *testing.B) {
	db := openBenchStore(b)
	cases := []struct {
		name string
		opts plantstore.ListOptions
	}{
		{"start", plantstore.ListOptions{Limit: 100}},
		{"end", plantstore.ListOptions{Limit: 100, After: ptr(int64(benchPlants - 100))}},
		{"tag/start", plantstore.ListOptions{Limit: 100, Tag: ptr("tag-3")}},
		{"tag/end", plantstore.ListOptions{Limit: 100, Tag: ptr("tag-3"), After: ptr(int64(benchPlants - 2000))}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				page, err := db.ListPlants(context.Background(), tc.opts)
				if err != nil || len(page) != 100 {
					b.Fatalf("%d plants, %v", len(page), err)
				}
			}
		})
	}
}

// BenchmarkGetPlant reads one plant near the start and near the end.
func BenchmarkGetPlant(b *testing.B) {
	db := openBenchStore(b)
	for _, id := range []int64{1, benchPlants} {
		b.Run(fmt.Sprint("id=", id), func(b *testing.B) {
			for b.Loop() {
				if _, err := db.GetPlant(context.Background(), id); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCreateParallel creates distinct plants from 64 goroutines, with
// group commit and, as the baseline, one transaction (one fsync) per create.
func BenchmarkCreateParallel(b *testing.B) {
	for _, mode := range []struct {
		name string
		opts Options
	}{
		{"one-tx-per-create", Options{NoGroupCommit: true}},
		{"group-commit", Options{}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			db, err := Open(context.Background(), filepath.Join(b.TempDir(), "create.db"), mode.opts)
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			createInParallel(b, db, 32) // 64 goroutines on 2 cores
		})
	}
}

// createInParallel times b.N creates of distinct plants from parallelism
// goroutines per CPU.
func createInParallel(b *testing.B, db *DB, parallelism int) {
	var next atomic.Int64
	b.SetParallelism(parallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := next.Add(1)
			if _, err := db.CreatePlant(context.Background(), plantstore.Plant{ID: id, Name: "a plant", Tag: ptr("bench")}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkCommitChunks times the writer's transaction for batches of
// creates of a few sizes (its WAL written, not synced): a count that is
// one statement (32, 64) against one just below it, which took five or
// six statements before chunkLen.
func BenchmarkCommitChunks(b *testing.B) {
	tag := "bench"
	for _, n := range []int{31, 32, 63, 64} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			db, err := Open(context.Background(), filepath.Join(b.TempDir(), "chunks.db"), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			id := int64(0)
			for b.Loop() {
				batch := make([]*writeRequest, n)
				for i := range batch {
					id++
					batch[i] = &writeRequest{kind: writeCreate, plant: plantstore.Plant{ID: id, Name: "a plant", Tag: &tag}}
				}
				db.commit(batch)
			}
			// The writer holds its connection while batches follow one another.
			db.releaseWriteConn()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/create")
		})
	}
}

// BenchmarkEventsOfARareType reads a page of the feed filtered by a type
// no kept event has, over 30,000 batches of 64 creates (about 1.9 million
// events, as a busy week keeps): the filter's cost is the scan of every
// batch.
func BenchmarkEventsOfARareType(b *testing.B) {
	db, _ := openTest(b, Options{})
	var changes strings.Builder
	changes.WriteString("[")
	for i := range 64 {
		if i > 0 {
			changes.WriteString(",")
		}
		fmt.Fprintf(&changes, `{"type":"plant.created","id":%d,"name":"a plant of a usual name"}`, i)
	}
	changes.WriteString("]")
	tx, err := db.write.Begin()
	if err != nil {
		b.Fatal(err)
	}
	for i := range 30_000 {
		if _, err := tx.Exec(`INSERT INTO event_batches (last, at, created, updated, deleted, changes) VALUES (?, 0, 64, 0, 0, ?)`, int64(i+1)*64, changes.String()); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		evs, err := db.Events(context.Background(), plantstore.EventQuery{Limit: 1000, Types: []string{plantstore.EventDeleted}})
		if err != nil || len(evs) != 0 {
			b.Fatalf("%d events, %v", len(evs), err)
		}
	}
}
