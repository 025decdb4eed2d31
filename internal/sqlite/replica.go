package sqlite

import (
	"context"
	"database/sql/driver"
	"math"
	"slices"
	"sync"

	"github.com/plantstore/plantstore"
)

// replica is the plants table in memory, in id order, while the store is
// small enough to hold it (replicaBytes), so reads of plants and pages
// of them cost no SQLite transaction. A page read from SQLite costs about
// 1.2 µs a row on this project's machine (modernc's SQLite is C translated
// to Go); from the replica it is a copy of the page's plants, whose
// strings are not copied (replica_block.go).
//
// Like plantCache it is coherent only while this process is the only
// writer of plants (Options.SoleServer). The writer applies each batch's
// changes once the batch is durable (durable.go), so changes are applied
// in commit order and before any of the batch's callers is answered. A
// batch whose outcome is unknown (an error at or after COMMIT, or a
// failed sync of the WAL) resets the replica, which is then loaded again.
//
// Loading runs in the background after Open, a page at a time, holding
// mu while it reads a page: the writer applies changes only to plants
// below next (the loaded ids), and a change to a plant from next on is
// read by a later page, which begins after that change committed, or
// waits for mu and then applies it. A store too large for replicaBytes
// (counted before loading, or reached while loading or by a write) turns
// the replica off until the next start; reads go to SQLite (and
// plantCache) as before.
type replica struct {
	mu    sync.RWMutex
	state replicaState
	next  int64 // loading: the plants with ids below next are in blocks
	// loadedAll: loading, every plant is in blocks, and the replica waits
	// for what it read to be durable before it answers.
	loadedAll bool
	// blocks hold the plants in id order: each block sorted and not
	// empty, each block's ids below the next block's. Small blocks keep
	// an insert or a delete a short copy.
	blocks []block
	n      int // plants held
	bytes  int // their size in memory (plantBytes), without dead bytes and slack
	max    int // bytes, at most

	reload chan struct{} // a reset asks the loader to start again
}

type replicaState int

const (
	replicaLoading replicaState = iota
	replicaComplete
	replicaOff
)

const (
	// replicaBytes bounds the replica's plants as plantBytes counts
	// them: about 350,000 plants with short names (a 20-byte name and a
	// 5-byte tag), 50,000 with the longest names and tags. A block's
	// text may hold up to as much again in dead bytes and a buffer's
	// slack, and the garbage collector's headroom doubles what the heap
	// holds. A larger store reads from SQLite.
	replicaBytes    = 16 << 20
	replicaBlock    = 256  // plants in a block, at most
	replicaLoadPage = 1000 // plants read per step of loading
)

// plantBytes is what p costs the replica: its place in a block and its
// strings.
func plantBytes(p plantstore.Plant) int {
	n := packedBytes + len(p.Name)
	if p.Tag != nil {
		n += len(*p.Tag)
	}
	return n
}

// minPlantBytes is the least a plant costs (a name has a character at
// least); a store whose count times it is past the bound is not loaded
// at all.
const minPlantBytes = packedBytes + 1

func newReplica(max int) *replica {
	return &replica{max: max, next: math.MinInt64, reload: make(chan struct{}, 1)}
}

// get returns the plant stored under id; ok is false when the replica
// cannot say (it is loading or off), and then found means nothing.
func (r *replica) get(id int64) (p plantstore.Plant, found, ok bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.state != replicaComplete {
		return plantstore.Plant{}, false, false
	}
	b, i, found := r.find(id)
	if !found {
		return plantstore.Plant{}, false, true
	}
	pp := r.blocks[b].plants[i]
	var tag *string
	if pp.tagLen >= 0 {
		tag = new(string)
	}
	return r.blocks[b].unpack(pp, tag), true, true
}

// page returns up to limit plants with ids from lower, in id order, or
// ok false when the replica cannot say.
func (r *replica) page(lower int64, limit int) (plants []plantstore.Plant, ok bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.state != replicaComplete {
		return nil, false
	}
	n := min(limit, r.n)
	plants = make([]plantstore.Plant, 0, n)
	// The tags of a page share one slice, made at the first tag.
	var tags []string
	b, i, _ := r.find(lower)
	for ; b < len(r.blocks) && len(plants) < limit; b, i = b+1, 0 {
		block := &r.blocks[b]
		for _, pp := range block.plants[i:min(len(block.plants), i+limit-len(plants))] {
			var tag *string
			if pp.tagLen >= 0 {
				if tags == nil {
					tags = make([]string, 0, n-len(plants))
				}
				tags = append(tags, "")
				tag = &tags[len(tags)-1]
			}
			plants = append(plants, block.unpack(pp, tag))
		}
	}
	return plants, true
}

// find returns where id is, or where it would be inserted: block b
// (len(blocks) past the end) and index i in it.
func (r *replica) find(id int64) (b, i int, found bool) {
	b, _ = slices.BinarySearchFunc(r.blocks, id, func(block block, id int64) int {
		return cmpID(block.last, id)
	})
	if b == len(r.blocks) {
		return b, 0, false
	}
	i, found = slices.BinarySearchFunc(r.blocks[b].plants, id, func(pp packedPlant, id int64) int { return cmpID(pp.id, id) })
	return b, i, found
}

func cmpID(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// apply makes the committed changes of one batch, in their order.
func (r *replica) apply(changes []plantstore.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range changes {
		if r.state == replicaOff {
			return
		}
		if r.state == replicaLoading && !r.loadedAll && e.Plant.ID >= r.next {
			continue // a later page reads it
		}
		if e.Type == plantstore.EventDeleted {
			r.remove(e.Plant.ID)
		} else {
			r.put(e.Plant)
		}
	}
}

// put inserts p, or replaces the plant with its id.
func (r *replica) put(p plantstore.Plant) {
	b, i, found := r.find(p.ID)
	size := plantBytes(p)
	if found {
		size -= packedBytes + r.blocks[b].plants[i].textBytes()
	}
	if r.bytes+size > r.max {
		r.turnOff()
		return
	}
	r.bytes += size
	if found {
		r.blocks[b].replace(i, p)
		return
	}
	r.n++
	if b == len(r.blocks) {
		// Past every id: at the end of the last block, or a new one.
		if b == 0 || len(r.blocks[b-1].plants) >= replicaBlock {
			r.blocks = append(r.blocks, newBlock(replicaBlock))
			r.blocks[b].insert(0, p)
			return
		}
		b, i = b-1, len(r.blocks[b-1].plants)
	}
	full := &r.blocks[b]
	full.insert(i, p)
	if len(full.plants) > replicaBlock {
		half := len(full.plants) / 2
		lower, upper := full.copyOf(full.plants[:half], replicaBlock), full.copyOf(full.plants[half:], replicaBlock)
		r.blocks[b] = lower
		r.blocks = slices.Insert(r.blocks, b+1, upper)
	}
}

func (r *replica) remove(id int64) {
	b, i, found := r.find(id)
	if !found {
		return
	}
	r.n--
	r.bytes -= packedBytes + r.blocks[b].plants[i].textBytes()
	r.blocks[b].remove(i)
	if len(r.blocks[b].plants) == 0 {
		r.blocks = slices.Delete(r.blocks, b, b+1)
	}
}

func (r *replica) turnOff() {
	r.state, r.blocks, r.n, r.bytes = replicaOff, nil, 0, 0
}

// reset forgets everything and has the loader start again: after a
// batch whose outcome is not known.
func (r *replica) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.state, r.blocks, r.n, r.bytes, r.next, r.loadedAll = replicaLoading, nil, 0, 0, math.MinInt64, false
	select {
	case r.reload <- struct{}{}:
	default:
	}
}

// replicaSource is the store as the replica's loader reads it. What it
// reads may include writes not yet durable (durable.go): the loader
// takes committedMark after a read and, before the replica answers
// anything, awaits that mark's durability.
type replicaSource interface {
	countPlants() (int64, error)
	readPlantsFrom(from int64, limit int) ([]plantstore.Plant, error)
	committedMark() uint64
	awaitDurable(mark uint64) error
}

// load fills the replica from the store, a page at a time, until it is
// complete or off, then waits for a reset; it returns when ctx ends. A
// store too large to hold is not loaded: a million plants would cost a
// passing 16 MB, and the time to read them, for nothing.
func (r *replica) load(ctx context.Context, src replicaSource) {
	for {
		if n, err := src.countPlants(); err == nil && n > int64(r.max/minPlantBytes) {
			r.mu.Lock()
			r.turnOff()
			r.mu.Unlock()
		}
		for ctx.Err() == nil && r.loadPage(src) {
		}
		select {
		case <-ctx.Done():
			return
		case <-r.reload:
		}
	}
}

// loadPage reads the next page into the replica; it says whether there
// is more to load. A failed read leaves the replica loading (reads go to
// SQLite) until a reset. After the last page it waits, without holding
// mu (the writes' effects need it), until what it read is durable, and
// only then lets the replica answer.
func (r *replica) loadPage(src replicaSource) bool {
	r.mu.Lock()
	if r.state != replicaLoading {
		r.mu.Unlock()
		return false
	}
	plants, err := src.readPlantsFrom(r.next, replicaLoadPage)
	mark := src.committedMark() // after the read: see awaitSynced
	if err != nil {
		r.mu.Unlock()
		return false
	}
	for _, p := range plants {
		if r.put(p); r.state == replicaOff {
			r.mu.Unlock()
			return false
		}
	}
	if len(plants) == replicaLoadPage && plants[len(plants)-1].ID != math.MaxInt64 {
		r.next = plants[len(plants)-1].ID + 1
		r.mu.Unlock()
		return true
	}
	r.loadedAll = true // from now on every change applies
	r.mu.Unlock()
	err = src.awaitDurable(mark)
	r.mu.Lock()
	defer r.mu.Unlock()
	// A reset meanwhile started the load again.
	if err == nil && r.state == replicaLoading && r.loadedAll {
		r.state = replicaComplete
	}
	return false
}

// countPlants counts the plants, for the replica's loader.
func (db *DB) countPlants() (n int64, err error) {
	err = db.readers.with(db.life, func(c *rawConn) error {
		return c.query(`SELECT count(*) FROM plants`, nil, func(v []driver.Value) bool {
			n = v[0].(int64)
			return false
		})
	})
	return n, err
}

// readPlantsFrom reads up to limit plants with ids from from on, in id
// order, for the replica's loader.
func (db *DB) readPlantsFrom(from int64, limit int) ([]plantstore.Plant, error) {
	plants := make([]plantstore.Plant, 0, limit)
	err := db.readers.with(db.life, func(c *rawConn) error {
		return c.query(`SELECT id, name, tag FROM plants WHERE id >= ? ORDER BY id LIMIT ?`, []any{from, int64(limit)},
			func(v []driver.Value) bool {
				plants = append(plants, plantstore.Plant{ID: v[0].(int64), Name: v[1].(string), Tag: optionalText(v[2])})
				return true
			})
	})
	return plants, err
}
