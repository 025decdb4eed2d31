package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/postgres"
	"github.com/plantstore/plantstore/internal/postgres/pgtest"
)

// BenchmarkCreateParallel creates distinct plants from 64 goroutines, in
// batches with 1 to 8 committers and, as the baseline, one transaction per
// create (Options.NoBatch). Each run has a fresh database, one active
// webhook subscriber (so each create also writes its outbox row), and the
// default pool. It reports µs/create, the wall time per create, and the
// mean batch size.
func BenchmarkCreateParallel(b *testing.B) {
	for _, mode := range []struct {
		name string
		opts postgres.Options
	}{
		{"one-tx-per-create", postgres.Options{NoBatch: true}},
		{"batched/committers=1", postgres.Options{Committers: 1}},
		{"batched/committers=2", postgres.Options{Committers: 2}},
		{"batched/committers=4", postgres.Options{Committers: 4}},
		{"batched/committers=8", postgres.Options{Committers: 8}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			url := pgtest.NewDatabase(b)
			var batches, batched atomic.Int64
			opts := mode.opts
			opts.ObserveBatch = func(n int) {
				batches.Add(1)
				batched.Add(int64(n))
			}
			db, err := postgres.Open(context.Background(), url, opts)
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			if _, err := db.AddSubscriber(context.Background(), "https://a.example/hook", "secret"); err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			b.SetParallelism(32) // 64 goroutines on 2 cores
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					id := next.Add(1)
					// A deadline, as every request's context has one.
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					_, err := db.CreatePlant(ctx, plantstore.Plant{ID: id, Name: "a plant", Tag: ptr("bench")})
					cancel()
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(b.N), "µs/create")
			if n := batches.Load(); n > 0 {
				b.ReportMetric(float64(batched.Load())/float64(n), "creates/batch")
			}
		})
	}
}

// BenchmarkGetParallel reads plants from 64 goroutines, in batches with 1
// to 4 readers and, as the baseline, one statement per get
// (Options.NoReadBatch), on the default pool, from a table of 10,000
// plants. Every get finds its plant. It reports µs/get, the wall time per
// get.
func BenchmarkGetParallel(b *testing.B) {
	benchReads(b, "get", func(ctx context.Context, db *postgres.DB, n int64) error {
		id := n % benchPlants
		p, err := db.GetPlant(ctx, id)
		if err == nil && p.ID != id {
			err = fmt.Errorf("got %+v", p)
		}
		return err
	})
}

// BenchmarkListParallel reads pages of 100 plants as BenchmarkGetParallel
// reads plants, each page from a different place in the table. It reports
// µs/page.
func BenchmarkListParallel(b *testing.B) {
	benchReads(b, "page", func(ctx context.Context, db *postgres.DB, n int64) error {
		after := n % (benchPlants - 100)
		page, err := db.ListPlants(ctx, plantstore.ListOptions{After: &after, Limit: 100})
		if err == nil && (len(page) != 100 || page[0].ID != after+1) {
			err = fmt.Errorf("a page of %d plants after %d, want 100 from %d", len(page), after, after+1)
		}
		return err
	})
}

const benchPlants = 10_000

// benchReads runs read from 64 goroutines against a table of benchPlants
// plants, with each of the read modes, n growing by a prime from call to
// call; it reports µs per what.
func benchReads(b *testing.B, what string, read func(ctx context.Context, db *postgres.DB, n int64) error) {
	url := pgtest.NewDatabase(b)
	seed, err := postgres.Open(context.Background(), url, postgres.Options{})
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := range int64(16) {
		wg.Go(func() {
			for id := w; id < benchPlants; id += 16 {
				if _, err := seed.CreatePlant(context.Background(), plantstore.Plant{ID: id, Name: "a plant", Tag: ptr("bench")}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	seed.Close()
	for _, mode := range []struct {
		name string
		opts postgres.Options
	}{
		{"one-statement-per-" + what, postgres.Options{NoReadBatch: true}},
		{"batched/readers=1", postgres.Options{Readers: 1}},
		{"batched/readers=2", postgres.Options{Readers: 2}},
		{"batched/readers=4", postgres.Options{Readers: 4}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			db, err := postgres.Open(context.Background(), url, mode.opts)
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			var next atomic.Int64
			b.SetParallelism(32) // 64 goroutines on 2 cores
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					err := read(ctx, db, next.Add(7919))
					cancel()
					if err != nil {
						b.Errorf("%s: %v", what, err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(b.N), "µs/"+what)
		})
	}
}
