package sqlite

import (
	"slices"
	"strings"

	"github.com/plantstore/plantstore"
)

// block is a run of the replica's plants in id order, held without a
// pointer per plant: the ids and the places of the strings in plants,
// the strings themselves in one buffer. The garbage collector scans
// neither (a slice of structs without pointers, and bytes), so a replica
// of hundreds of thousands of plants costs each collection almost
// nothing; held as plantstore.Plant values, every name and tag was an
// object the collector had to visit, and its marking, at a few
// milliseconds a cycle on one core, was most of a create's p99
// (BENCHMARKS.md "Design 7").
//
// text only grows: a string taken from it stays valid whatever happens
// to the block later (strings.Builder never writes over bytes it has
// handed out; growing copies them to a new buffer), so a read copies no
// bytes. A replaced or removed plant's strings stay behind as dead
// bytes until compact writes the live ones to a new buffer.
type block struct {
	// last is the last plant's id, kept beside the plants so that a
	// search of the blocks reads only the blocks' slice, not each probed
	// block's plants: a cache miss fewer a probe, about 8 a lookup.
	last   int64
	plants []packedPlant
	text   *strings.Builder // a pointer: blocks are copied, and a Builder must not be
	dead   int              // bytes of text no plant refers to
}

// packedPlant is a plant as a block holds it: its strings as offsets and
// lengths in the block's text.
type packedPlant struct {
	id            int64
	name, nameLen uint32
	tag           uint32
	tagLen        int32 // -1: no tag
}

// packedBytes is what a packedPlant costs without its strings.
const packedBytes = 24

func newBlock(capacity int) block {
	return block{plants: make([]packedPlant, 0, capacity), text: new(strings.Builder)}
}

// unpack returns the plant pp packs; its tag, if any, is stored in *tag.
func (b *block) unpack(pp packedPlant, tag *string) plantstore.Plant {
	text := b.text.String()
	p := plantstore.Plant{ID: pp.id, Name: text[pp.name : pp.name+pp.nameLen]}
	if pp.tagLen >= 0 {
		*tag = text[pp.tag : pp.tag+uint32(pp.tagLen)]
		p.Tag = tag
	}
	return p
}

// pack writes p's strings to the end of text and returns its packedPlant.
func (b *block) pack(p plantstore.Plant) packedPlant {
	pp := packedPlant{id: p.ID, name: uint32(b.text.Len()), nameLen: uint32(len(p.Name)), tagLen: -1}
	b.text.WriteString(p.Name)
	if p.Tag != nil {
		pp.tag, pp.tagLen = uint32(b.text.Len()), int32(len(*p.Tag))
		b.text.WriteString(*p.Tag)
	}
	return pp
}

func (pp packedPlant) textBytes() int { return int(pp.nameLen) + max(0, int(pp.tagLen)) }

// noteLast sets last from plants, after each change to which plants a
// block holds (replace keeps the id).
func (b *block) noteLast() {
	if n := len(b.plants); n > 0 {
		b.last = b.plants[n-1].id
	}
}

func (b *block) insert(i int, p plantstore.Plant) {
	b.plants = slices.Insert(b.plants, i, b.pack(p))
	b.noteLast()
}

func (b *block) replace(i int, p plantstore.Plant) {
	b.dead += b.plants[i].textBytes()
	b.plants[i] = b.pack(p)
	b.compactIfWasteful()
}

func (b *block) remove(i int) {
	b.dead += b.plants[i].textBytes()
	b.plants = slices.Delete(b.plants, i, i+1)
	b.noteLast()
	b.compactIfWasteful()
}

// compactIfWasteful writes the live strings to a new buffer once dead
// bytes are more than half of it, so a block holds at most about twice
// its plants' strings.
func (b *block) compactIfWasteful() {
	if b.dead > 64 && 2*b.dead > b.text.Len() {
		*b = b.copyOf(b.plants, cap(b.plants))
	}
}

// copyOf returns a new block of plants, which are b's, with their strings
// in a new buffer; b is left as it was.
func (b *block) copyOf(plants []packedPlant, capacity int) block {
	c := newBlock(capacity)
	size := 0
	for _, pp := range plants {
		size += pp.textBytes()
	}
	c.text.Grow(size)
	var tag string
	for _, pp := range plants {
		c.plants = append(c.plants, c.pack(b.unpack(pp, &tag)))
	}
	c.noteLast()
	return c
}
