package sqlite

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
)

// The replica's blocks against a sorted model, through inserts in random
// order (splitting blocks), replacements and deletes (emptying some, and
// compacting their text), with every page and point read compared; and
// the plants read halfway through still read the same at the end, though
// their blocks were split and compacted since.
func TestReplicaBlocksMatchAModel(t *testing.T) {
	r := newReplica(1 << 20)
	r.state = replicaComplete
	model := map[int64]plantstore.Plant{}
	rng := rand.New(rand.NewPCG(1, 2))
	ids := []int64{math.MinInt64, math.MaxInt64, 0, -1, 1}
	for range 5000 {
		ids = append(ids, rng.Int64N(20000)-10000)
	}
	var early, earlyCopies []plantstore.Plant
	for step, id := range ids {
		if step == len(ids)/2 {
			early, _ = r.page(math.MinInt64, len(model))
			for _, p := range early {
				c := plantstore.Plant{ID: p.ID, Name: strings.Clone(p.Name)}
				if p.Tag != nil {
					c.Tag = ptr(strings.Clone(*p.Tag))
				}
				earlyCopies = append(earlyCopies, c)
			}
		}
		p := plantstore.Plant{ID: id, Name: fmt.Sprint("v", step)}
		switch step % 3 {
		case 1:
			p.Tag = ptr("")
		case 2:
			p.Tag = ptr(fmt.Sprint("t", step))
		}
		r.apply([]plantstore.Event{{Type: plantstore.EventCreated, Plant: p}})
		model[id] = p
		if step%7 == 0 { // delete another
			gone := ids[rng.IntN(step+1)]
			r.apply([]plantstore.Event{{Type: plantstore.EventDeleted, Plant: plantstore.Plant{ID: gone}}})
			delete(model, gone)
		}
	}
	// Delete a run of neighbours, emptying whole blocks.
	sorted := slices.Sorted(maps.Keys(model))
	for _, id := range sorted[100:900] {
		r.apply([]plantstore.Event{{Type: plantstore.EventDeleted, Plant: plantstore.Plant{ID: id}}})
		delete(model, id)
	}
	checkReplica(t, r, model)
	for i := range early {
		if !samePlant(early[i], earlyCopies[i]) {
			t.Fatalf("plant %d read halfway through now reads %+v, want %+v", i, early[i], earlyCopies[i])
		}
	}
}

func checkReplica(t *testing.T, r *replica, model map[int64]plantstore.Plant) {
	t.Helper()
	sorted := slices.Sorted(maps.Keys(model))
	if r.n != len(model) {
		t.Fatalf("replica counts %d plants, the model has %d", r.n, len(model))
	}
	bytes := 0
	for _, p := range model {
		bytes += plantBytes(p)
	}
	if r.bytes != bytes {
		t.Fatalf("replica counts %d bytes, its plants take %d", r.bytes, bytes)
	}
	for b, block := range r.blocks {
		if len(block.plants) == 0 || len(block.plants) > replicaBlock {
			t.Fatalf("block %d holds %d plants", b, len(block.plants))
		}
	}
	all, ok := r.page(math.MinInt64, len(model)+1)
	if !ok {
		t.Fatal("a complete replica did not answer")
	}
	if len(all) != len(sorted) {
		t.Fatalf("the whole table: %d plants, want %d", len(all), len(sorted))
	}
	for i, p := range all {
		if !samePlant(p, model[sorted[i]]) {
			t.Fatalf("plant %d of the table: %+v, want %+v", i, p, model[sorted[i]])
		}
	}
	for k := 0; k < len(sorted); k += 37 {
		for _, lower := range []int64{sorted[k], sorted[k] - 1} {
			page, _ := r.page(lower, 100)
			first, _ := slices.BinarySearch(sorted, lower)
			want := sorted[first:min(len(sorted), first+100)]
			if len(page) != len(want) || (len(page) > 0 && (page[0].ID != want[0] || page[len(page)-1].ID != want[len(want)-1])) {
				t.Fatalf("page from %d: %d plants, want %d from %d", lower, len(page), len(want), want[0])
			}
		}
		if p, found, _ := r.get(sorted[k]); !found || !samePlant(p, model[sorted[k]]) {
			t.Fatalf("get %d: %+v, %t", sorted[k], p, found)
		}
	}
	if _, found, ok := r.get(12345678); found || !ok {
		t.Fatalf("get of a missing id: found %t, ok %t", found, ok)
	}
}

// A store that grows past the replica's bound turns it off, and reads go
// on from SQLite, right.
func TestReplicaTurnsOffPastItsBound(t *testing.T) {
	r := newReplica(10 * plantBytes(plantstore.Plant{Name: "x"}))
	r.state = replicaComplete
	for id := range int64(11) {
		r.apply([]plantstore.Event{{Type: plantstore.EventCreated, Plant: plantstore.Plant{ID: id, Name: "x"}}})
	}
	if _, ok := r.page(0, 100); ok || r.state != replicaOff || r.blocks != nil {
		t.Fatalf("past its bound the replica still answers (state %d)", r.state)
	}
}

// A store counted too large for the bound is not loaded at all: no page
// is read, and the replica is off.
func TestReplicaDoesNotLoadAStoreTooLarge(t *testing.T) {
	r := newReplica(1000 * minPlantBytes)
	src := &countingSource{count: 1001}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.load(ctx, src) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.mu.RLock()
		state := r.state
		r.mu.RUnlock()
		if state == replicaOff {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica of a store too large is in state %d", state)
		}
		time.Sleep(time.Millisecond)
	}
	if src.pages.Load() != 0 {
		t.Errorf("%d pages read of a store too large to hold", src.pages.Load())
	}
}

type countingSource struct {
	count int64
	pages atomic.Int64
}

func (s *countingSource) countPlants() (int64, error) { return s.count, nil }
func (s *countingSource) committedMark() uint64       { return 0 }
func (s *countingSource) awaitDurable(uint64) error   { return nil }

func (s *countingSource) readPlantsFrom(int64, int) ([]plantstore.Plant, error) {
	s.pages.Add(1)
	return nil, nil
}

// The replica loads while writers change the table, in pages; when it is
// complete it holds exactly what SQLite holds, and every read through the
// store, from the replica or from SQLite, is what SQLite holds after the
// writes it saw acknowledged.
func TestReplicaLoadsRightUnderConcurrentWrites(t *testing.T) {
	db, _ := openTest(t, Options{SoleServer: true})
	ctx := context.Background()
	const seeded = 3*replicaLoadPage + 17
	for id := range int64(seeded) {
		if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: id * 2, Name: "seed"}); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 3 {
		table, err := db.readPlantsFrom(math.MinInt64, 10*seeded)
		if err != nil {
			t.Fatal(err)
		}
		db.replica.reset() // load again, under the writers below
		var writers sync.WaitGroup
		for w := range int64(4) {
			// Each writer owns the ids of its residue, so it knows what
			// each of them must read after its own writes.
			owned := map[int64]string{}
			for _, p := range table {
				if p.ID%4 == w {
					owned[p.ID] = p.Name
				}
			}
			writers.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(round), uint64(w)))
				for i := range 300 {
					id := rng.Int64N(seeded/2)*4 + w
					name := fmt.Sprintf("r%d w%d i%d", round, w, i)
					_, exists := owned[id]
					switch rng.IntN(3) {
					case 0:
						db.CreatePlant(ctx, plantstore.Plant{ID: id, Name: name})
						if !exists {
							owned[id] = name
						}
					case 1:
						db.UpdatePlant(ctx, plantstore.Plant{ID: id, Name: name}, nil)
						if exists {
							owned[id] = name
						}
					default:
						db.DeletePlant(ctx, id, nil)
						delete(owned, id)
					}
					got, err := db.GetPlant(ctx, id)
					want, exists := owned[id]
					if exists && (err != nil || got.Name != want) || !exists && plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
						t.Errorf("round %d: plant %d after its write reads %+v, %v; want %q (exists %t)", round, id, got, err, want, exists)
						return
					}
				}
			})
		}
		writers.Wait()
		waitComplete(t, db)
		if table, err = db.readPlantsFrom(math.MinInt64, 10*seeded); err != nil {
			t.Fatal(err)
		}
		db.replica.mu.RLock()
		checkReplicaEqual(t, db.replica, table)
		db.replica.mu.RUnlock()
		page, err := db.ListPlants(ctx, plantstore.ListOptions{Limit: 1000})
		if err != nil || len(page) != min(1000, len(table)) || !slices.EqualFunc(page, table[:len(page)], samePlant) {
			t.Fatalf("round %d: the first page through the store differs from the table (%d plants, %v)", round, len(page), err)
		}
	}
}

func samePlant(a, b plantstore.Plant) bool {
	return a.ID == b.ID && a.Name == b.Name && (a.Tag == nil) == (b.Tag == nil) && (a.Tag == nil || *a.Tag == *b.Tag)
}

func waitComplete(t *testing.T, db *DB) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		db.replica.mu.RLock()
		state := db.replica.state
		db.replica.mu.RUnlock()
		if state == replicaComplete {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica did not finish loading (state %d)", state)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkReplicaEqual compares the replica, which the caller holds, with the
// table read from SQLite.
func checkReplicaEqual(t *testing.T, r *replica, table []plantstore.Plant) {
	t.Helper()
	var held []plantstore.Plant
	for _, block := range r.blocks {
		for _, pp := range block.plants {
			held = append(held, block.unpack(pp, new(string)))
		}
	}
	if r.n != len(table) || len(held) != len(table) {
		t.Fatalf("the replica holds %d plants (counts %d), the table %d", len(held), r.n, len(table))
	}
	for i := range table {
		if held[i].ID != table[i].ID || held[i].Name != table[i].Name {
			t.Fatalf("plant %d: the replica has %+v, the table %+v", i, held[i], table[i])
		}
	}
}

// BenchmarkReplicaGet reads plants at random from replicas of 100,000
// and 350,000 (about its bound with short names), each read a different
// plant, so that most are cache misses, as in the server.
func BenchmarkReplicaGet(b *testing.B) {
	for _, n := range []int{100_000, 350_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			r := newReplica(1 << 30)
			r.state = replicaComplete
			tag := "bench"
			for id := range int64(n) {
				r.put(plantstore.Plant{ID: 3 * id, Name: "plant number 1", Tag: &tag})
			}
			rng := rand.New(rand.NewPCG(1, 2))
			ids := make([]int64, 1<<16)
			for i := range ids {
				ids[i] = 3 * rng.Int64N(int64(n))
			}
			b.ResetTimer()
			i := 0
			for b.Loop() {
				if _, found, _ := r.get(ids[i&(len(ids)-1)]); !found {
					b.Fatal("not found")
				}
				i++
			}
		})
	}
}
