package sqlite

import (
	"sync"

	"github.com/plantstore/plantstore"
)

// plantCache keeps recently read plants in memory, so a point read costs no
// SQLite transaction. It is coherent only while this process is the only
// one writing plants, which Options.SoleServer guarantees with a lock.
//
// Writes invalidate after their commit and before they are acknowledged.
// A read fills the cache only if no plant write happened since the read
// began (the generation is unchanged), so a value read before a write can
// never be cached after it.
type plantCache struct {
	mu    sync.RWMutex
	gen   uint64
	items map[int64]plantstore.Plant
	max   int
}

func newPlantCache(max int) *plantCache {
	return &plantCache{items: make(map[int64]plantstore.Plant), max: max}
}

func (c *plantCache) get(id int64) (plantstore.Plant, bool, uint64) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	p, ok := c.items[id]
	return p, ok, c.gen
}

// fill caches p if no write happened since generation gen was read.
func (c *plantCache) fill(p plantstore.Plant, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return
	}
	if len(c.items) >= c.max {
		for id := range c.items { // an arbitrary entry: a bounded map, not an LRU
			delete(c.items, id)
			break
		}
	}
	c.items[p.ID] = p
}

// invalidate forgets ids and starts a new generation.
func (c *plantCache) invalidate(ids ...int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for _, id := range ids {
		delete(c.items, id)
	}
}
