package postgres

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/plantstore/plantstore"
)

// Batched reads: gets of one plant and pages. Such a read costs
// the server little for its rows and much around it: a round trip, a
// backend woken, a portal bound and an executor started, and a pooled
// connection held for all of it. Under load, reads queued for
// connections and the server spent its CPU on that overhead
// (BenchmarkGetParallel, 64 goroutines: 59-66 µs a get, one statement
// each; 14-15 µs batched by two readers, 15-24 by one, 19-24 by four).
// So reads go to a few reader goroutines, as creates go to the
// committers: a reader that is free takes every read queued and sends
// one statement for its gets, id = ANY($1), and one for its pages of
// each kind (all plants, one tag's), each page a LATERAL keyset scan, in
// one round trip. There is no waiting to
// fill a batch: under light load a batch is one read. A read never sees
// less than it would alone: its batch's statements start after the read
// was queued, so their snapshot holds every write acknowledged before
// the read began, on this instance or another.
//
// In a batch a page's tag is a parameter of its LATERAL scan, and the
// planner, not knowing which tag, plans "tag = r.tag AND id >= r.first"
// as a walk of the primary key with a filter, which for a rare tag is the
// whole table. So a tag's page asks for "(tag, id) >= (r.tag, r.first)",
// which only plants_by_tag can serve as a range (TestTagPagesPlan).

// maxReadBatch bounds a batch of reads.
const maxReadBatch = 256

// maxReadRows bounds the rows a batch's pages may ask for: a reader then
// holds no more than the 16 longest pages a default pool read at once
// before pages were batched, and a short page does not wait behind
// hundreds of long ones.
const maxReadRows = 16 * (plantstore.MaxListLimit + 1)

// DefaultReaders is how many batches of reads may be in flight at once
// when Options.Readers is 0: with two, one batch can be read while the
// next gathers, and a slow read holds up only half the reads.
const DefaultReaders = 2

// readRequest is a get of plant id, or with page set, a page of up to
// limit plants from id up, of tag when it is set.
type readRequest struct {
	ctx   context.Context // the caller's; its read is left out once it ends
	id    int64
	page  bool
	limit int
	tag   *string
	done  chan readResult // buffered: a reader never blocks on it
}

func (r readRequest) caller() context.Context { return r.ctx }

// rows is what r counts against maxReadRows.
func (r readRequest) rows() int {
	if !r.page {
		return 1
	}
	return min(r.limit, maxReadRows) // a longer page goes alone
}

type readResult struct {
	plant plantstore.Plant   // a get's
	page  []plantstore.Plant // a page's
	err   error
}

const (
	getsSQL  = `SELECT id, name, tag FROM plants WHERE id = ANY($1)`
	pagesSQL = `SELECT r.n, p.id, p.name, p.tag
	FROM unnest($1::int8[], $2::int4[]) WITH ORDINALITY AS r(first, lim, n)
	CROSS JOIN LATERAL (SELECT id, name, tag FROM plants WHERE id >= r.first ORDER BY id LIMIT r.lim) AS p`
	tagPagesSQL = `SELECT r.n, p.id, p.name, p.tag
	FROM unnest($1::text[], $2::int8[], $3::int4[]) WITH ORDINALITY AS r(tag, first, lim, n)
	CROSS JOIN LATERAL (SELECT id, name, tag FROM plants WHERE (tag, id) >= (r.tag, r.first) AND tag = r.tag ORDER BY tag, id LIMIT r.lim) AS p`
)

// GetPlant returns plant id, or ENOTFOUND. Unless Options.NoReadBatch is
// set, it goes through a reader with the reads queued beside it.
func (db *DB) GetPlant(ctx context.Context, id int64) (plantstore.Plant, error) {
	if db.reads == nil {
		return db.getOne(ctx, id)
	}
	r, err := db.readBatched(ctx, readRequest{ctx: ctx, id: id}, getOp(id))
	return r.plant, err
}

// ListPlants reads one page by keyset, from "id >= first" on the primary
// key, or from (tag, first) on plants_by_tag, so the page's position in
// the table does not change its cost. Unless Options.NoReadBatch is
// set, it goes through a reader with the reads queued beside it.
func (db *DB) ListPlants(ctx context.Context, opts plantstore.ListOptions) ([]plantstore.Plant, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	first, ok := opts.FirstID()
	if !ok {
		return []plantstore.Plant{}, nil
	}
	if db.reads == nil {
		return db.listOne(ctx, opts.Tag, first, opts.Limit)
	}
	r, err := db.readBatched(ctx, readRequest{ctx: ctx, id: first, page: true, limit: opts.Limit, tag: opts.Tag}, listOp)
	return r.page, err
}

const listOp = "list plants"

func getOp(id int64) string { return fmt.Sprintf("get plant %d", id) }

// readBatched queues req for a reader and waits for its answer.
func (db *DB) readBatched(ctx context.Context, req readRequest, op string) (readResult, error) {
	if err := ctx.Err(); err != nil {
		return readResult{}, db.storeError(op, err)
	}
	req.done = make(chan readResult, 1)
	if err := enqueue(db, ctx, db.reads, req); err != nil {
		return readResult{}, db.storeError(op, err)
	}
	select {
	case r := <-req.done:
		return r, r.err
	case <-ctx.Done():
		return readResult{}, db.storeError(op, ctx.Err())
	}
}

// reader runs until reads is closed, reading what it finds queued, up to
// maxReadRows a batch.
func (db *DB) reader() {
	var rb readBatch
	runBatches(db.reads, maxReadBatch, readRequest.rows, maxReadRows, func(batch []readRequest) { db.read(batch, &rb) })
}

// readBatch is a reader's scratch space, reused from batch to batch.
type readBatch struct {
	gets  []readRequest
	ids   []int64 // the gets'
	pages pageArgs
	tags  pageArgs // pages of one tag
	found map[int64]plantstore.Plant
	n, id int64
	name  string
	tag   pgtype.Text
}

// pageArgs are the pages of one statement and its arguments.
type pageArgs struct {
	reqs   []readRequest
	tags   []string
	firsts []int64
	limits []int32
}

// reset empties a, letting its callers' contexts go.
func (a *pageArgs) reset() {
	clear(a.reqs)
	clear(a.tags)
	a.reqs, a.tags, a.firsts, a.limits = a.reqs[:0], a.tags[:0], a.firsts[:0], a.limits[:0]
}

func (a *pageArgs) add(r readRequest) {
	a.reqs = append(a.reqs, r)
	if r.tag != nil {
		a.tags = append(a.tags, *r.tag)
	}
	a.firsts = append(a.firsts, r.id)
	a.limits = append(a.limits, int32(min(r.limit, math.MaxInt32))) // no page holds more
}

// read sends the gets and the pages of batch in one round trip and
// answers each request: the gets first, as their rows come first.
func (db *DB) read(batch []readRequest, rb *readBatch) {
	live := withoutAbandoned(batch)
	if len(live) == 0 {
		return
	}
	defer func() { // let the callers' contexts go
		clear(rb.gets)
		rb.gets, rb.ids = rb.gets[:0], rb.ids[:0]
		rb.pages.reset()
		rb.tags.reset()
	}()
	for _, r := range live {
		switch {
		case !r.page:
			rb.gets = append(rb.gets, r)
			rb.ids = append(rb.ids, r.id)
		case r.tag == nil:
			rb.pages.add(r)
		default:
			rb.tags.add(r)
		}
	}
	if db.observeReadBatch != nil {
		db.observeReadBatch(len(rb.gets), len(rb.pages.reqs)+len(rb.tags.reqs))
	}
	ctx, stop := batchContext(live)
	defer stop()
	var b pgx.Batch
	if len(rb.gets) > 0 {
		b.Queue(getsSQL, rb.ids)
	}
	if len(rb.pages.reqs) > 0 {
		b.Queue(pagesSQL, rb.pages.firsts, rb.pages.limits)
	}
	if len(rb.tags.reqs) > 0 {
		b.Queue(tagPagesSQL, rb.tags.tags, rb.tags.firsts, rb.tags.limits)
	}
	results := db.pool.SendBatch(ctx, &b)
	var err error
	if len(rb.gets) > 0 {
		err = db.answerGets(results, rb)
	}
	for _, pages := range []*pageArgs{&rb.pages, &rb.tags} {
		if len(pages.reqs) > 0 {
			err = db.answerPages(results, rb, pages.reqs, err)
		}
	}
	results.Close()
}

// answerGets reads the gets' rows and answers them.
func (db *DB) answerGets(results pgx.BatchResults, rb *readBatch) error {
	if rb.found == nil {
		rb.found = make(map[int64]plantstore.Plant, maxReadBatch)
	}
	defer clear(rb.found)
	err := readRows(results, []any{&rb.id, &rb.name, &rb.tag}, func() {
		rb.found[rb.id] = plantstore.Plant{ID: rb.id, Name: rb.name, Tag: textPtr(rb.tag)}
	})
	for _, r := range rb.gets {
		var res readResult
		switch p, ok := rb.found[r.id]; {
		case err != nil:
			res.err = db.storeError(getOp(r.id), err)
		case ok:
			res.plant = p
		default:
			res.err = plantstore.PlantNotFound(r.id)
		}
		r.done <- res
	}
	return err
}

// answerPages reads the rows of reqs, the next statement's pages, and
// answers them; err is an earlier statement's failure, which the pages
// share, as the batch failed with it.
func (db *DB) answerPages(results pgx.BatchResults, rb *readBatch, reqs []readRequest, err error) error {
	pages := make([][]plantstore.Plant, len(reqs))
	if err == nil {
		err = readRows(results, []any{&rb.n, &rb.id, &rb.name, &rb.tag}, func() {
			i := int(rb.n - 1)
			if pages[i] == nil {
				pages[i] = make([]plantstore.Plant, 0, min(reqs[i].limit, 1024))
			}
			pages[i] = append(pages[i], plantstore.Plant{ID: rb.id, Name: rb.name, Tag: textPtr(rb.tag)})
		})
	}
	for i, r := range reqs {
		if err != nil {
			r.done <- readResult{err: db.storeError(listOp, err)}
			continue
		}
		page := pages[i]
		if page == nil {
			page = []plantstore.Plant{}
		}
		// The nested loop gives each page in the index's order; nothing
		// in SQL promises it, so it is checked (and a page sorted only
		// if a plan ever changes that).
		if !slices.IsSortedFunc(page, byID) {
			slices.SortFunc(page, byID)
		}
		r.done <- readResult{page: page}
	}
	return err
}

func byID(a, b plantstore.Plant) int { return cmp.Compare(a.ID, b.ID) }

// readRows reads the next result of results into dest, calling row after
// each row is scanned.
func readRows(results pgx.BatchResults, dest []any, row func()) error {
	rows, err := results.Query()
	if err != nil {
		return err
	}
	_, err = pgx.ForEachRow(rows, dest, func() error {
		row()
		return nil
	})
	return err
}

// textPtr is a nullable text column as a plant's tag. pgtype.Text scans
// without reflection, which a **string needs.
func textPtr(t pgtype.Text) *string {
	if !t.Valid {
		return nil
	}
	s := t.String
	return &s
}

// listOne reads one page in a statement of its own (Options.NoReadBatch).
func (db *DB) listOne(ctx context.Context, tag *string, first int64, limit int) ([]plantstore.Plant, error) {
	var rows pgx.Rows
	var err error
	if tag != nil {
		rows, err = db.pool.Query(ctx, `SELECT id, name, tag FROM plants WHERE tag = $1 AND id >= $2 ORDER BY id LIMIT $3`,
			*tag, first, limit)
	} else {
		rows, err = db.pool.Query(ctx, `SELECT id, name, tag FROM plants WHERE id >= $1 ORDER BY id LIMIT $2`,
			first, limit)
	}
	if err != nil {
		return nil, db.storeError(listOp, err)
	}
	plants := make([]plantstore.Plant, 0, min(limit, 1024))
	var id int64
	var name string
	var tagCol pgtype.Text
	_, err = pgx.ForEachRow(rows, []any{&id, &name, &tagCol}, func() error {
		plants = append(plants, plantstore.Plant{ID: id, Name: name, Tag: textPtr(tagCol)})
		return nil
	})
	if err != nil {
		return nil, db.storeError(listOp, err)
	}
	return plants, nil
}
