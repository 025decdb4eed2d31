// Command bindings compares the CPU cost of SQLite bindings for Go on the
// operations plantstore performs: durable group-committed inserts, point
// reads by primary key and keyset list pages.
//
// Every binding runs against a real file in a temporary directory with
// journal_mode=WAL and synchronous=FULL (every commit fsyncs the WAL), on
// plantstore's schema. See README.md for how to run it and what it reports.
package main

import (
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// plant mirrors plantstore.Plant's stored columns (Tag is nullable).
type plant struct {
	ID        int64
	Name      string
	Tag       *string
	CreatedAt int64
}

// binding is one way of driving SQLite. A binding owns one connection and
// is used from one goroutine.
type binding interface {
	// insert inserts rows in one transaction with one multi-row INSERT
	// (prepared once per row count) and commits.
	insert(rows []plant) error
	// get reads one plant by id; ok is false when there is none.
	get(id int64) (p plant, ok bool, err error)
	// list appends the page of up to limit plants with id >= from to out.
	list(from int64, limit int, out []plant) ([]plant, error)
	// scalar runs a query returning one text/integer value (for checks).
	scalar(query string) (string, error)
	close() error
}

type opener struct {
	name string
	open func(path string) (binding, error)
}

var openers = []opener{
	{"modernc-sql", openModerncSQL},
	{"modernc-raw", openModerncRaw},
	{"zombiezen", openZombiezen},
	{"mattn-sql", openMattnSQL},
	{"mattn-raw", openMattnRaw},
	{"ncruces-sql", openNcrucesSQL},
	{"ncruces-direct", openNcrucesDirect},
}

const (
	schemaTable = `CREATE TABLE IF NOT EXISTS plants (id INTEGER PRIMARY KEY, name TEXT NOT NULL, tag TEXT, created_at INTEGER NOT NULL)`
	schemaIndex = `CREATE INDEX IF NOT EXISTS plants_by_tag ON plants (tag, id)`
	getSQL      = `SELECT name, tag FROM plants WHERE id = ?`
	listSQL     = `SELECT id, name, tag FROM plants WHERE id >= ? ORDER BY id LIMIT ?`
	busyMillis  = 5000
	pageRows    = 101 // a page of 100 plus one to know whether there is more
	pointRows   = 10_000
	listRows    = 100_000
)

var tagIndex = true

func schema() []string {
	if tagIndex {
		return []string{schemaTable, schemaIndex}
	}
	return []string{schemaTable}
}

// multiInsertSQL is plantstore's n-row INSERT.
func multiInsertSQL(n int) string {
	var q strings.Builder
	q.WriteString("INSERT INTO plants (id, name, tag, created_at) VALUES ")
	for row := range n {
		if row > 0 {
			q.WriteString(", ")
		}
		q.WriteString("(?, ?, ?, ?)")
	}
	return q.String()
}

var benchTag = "bench"

// makeRows fills rows with plants first, first+1, ...: a 16-character name,
// tag "bench", one creation time, as one group commit would.
func makeRows(rows []plant, first int64) {
	now := time.Now().UnixMilli()
	for i := range rows {
		id := first + int64(i)
		rows[i] = plant{ID: id, Name: plantName(id), Tag: &benchTag, CreatedAt: now}
	}
}

func plantName(id int64) string {
	var b [16]byte
	copy(b[:], "plant-0000000000")
	s := strconv.AppendInt(b[:0:0], id, 10)
	copy(b[16-len(s):], s)
	return string(b[:])
}

// result is one measurement.
type result struct {
	binding, what string
	unit          string // what one "per" counts: row, commit, read, page
	units         int64
	wall, cpu     time.Duration
	allocs, bytes uint64
	goroutines    uint64
	preempted     int64 // involuntary context switches: a sign of other load
}

func (r result) perWall() float64 { return float64(r.wall.Nanoseconds()) / 1e3 / float64(r.units) }
func (r result) perCPU() float64  { return float64(r.cpu.Nanoseconds()) / 1e3 / float64(r.units) }
func (r result) perAllocs() float64 {
	return float64(r.allocs) / float64(r.units)
}
func (r result) perBytes() float64 { return float64(r.bytes) / float64(r.units) }
func (r result) perGoroutines() float64 {
	return float64(r.goroutines) / float64(r.units)
}

// cpuTime returns the process's user+system CPU time (all threads) and
// its count of involuntary context switches.
func cpuTime() (time.Duration, int64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ru.Nivcsw
}

var goroutineSample = []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}

func goroutinesCreated() uint64 {
	metrics.Read(goroutineSample)
	if goroutineSample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return goroutineSample[0].Value.Uint64()
}

// measure runs op (each call doing unitsPerOp units) for a warm-up and
// then for at least dur, and reports the totals.
func measure(dur time.Duration, unitsPerOp int, op func(i int) error) (result, error) {
	warm := time.Now()
	i := 0
	for ; time.Since(warm) < dur/10; i++ {
		if err := op(i); err != nil {
			return result{}, err
		}
	}
	runtime.GC()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	g0 := goroutinesCreated()
	c0, p0 := cpuTime()
	t0 := time.Now()
	n := 0
	for ; ; n++ {
		if n&7 == 0 && time.Since(t0) >= dur {
			break
		}
		if err := op(i + n); err != nil {
			return result{}, err
		}
	}
	wall := time.Since(t0)
	c1, p1 := cpuTime()
	g1 := goroutinesCreated()
	runtime.ReadMemStats(&ms1)
	return result{
		units: int64(n) * int64(unitsPerOp),
		wall:  wall, cpu: c1 - c0,
		allocs:     ms1.Mallocs - ms0.Mallocs,
		bytes:      ms1.TotalAlloc - ms0.TotalAlloc,
		goroutines: g1 - g0,
		preempted:  p1 - p0,
	}, nil
}

func main() {
	dur := flag.Duration("dur", 2*time.Second, "minimum measured time per measurement")
	reps := flag.Int("reps", 3, "repetitions (medians are reported)")
	only := flag.String("only", "", "comma-separated bindings to run (default all)")
	dir := flag.String("dir", "", "directory for database files (default a new temp dir)")
	check := flag.Bool("check", false, "only check that each binding opens, writes and reads")
	flag.BoolVar(&tagIndex, "tagindex", true, "create the plants_by_tag index")
	flag.Parse()

	ops := openers
	if *only != "" {
		ops = nil
		for _, name := range strings.Split(*only, ",") {
			i := slices.IndexFunc(openers, func(o opener) bool { return o.name == name })
			if i < 0 {
				fatalf("unknown binding %q", name)
			}
			ops = append(ops, openers[i])
		}
	}
	base := *dir
	if base == "" {
		d, err := os.MkdirTemp("", "bindings-")
		if err != nil {
			fatalf("%v", err)
		}
		defer os.RemoveAll(d)
		base = d
	}
	if *check {
		os.Exit(runCheck(base, ops))
	}
	run(base, ops, *dur, *reps)
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bindings: "+format+"\n", args...)
	os.Exit(1)
}

// runCheck opens every binding, writes and reads a little, and reports.
func runCheck(base string, ops []opener) int {
	code := 0
	fmt.Printf("go %s %s/%s cgo-enabled=%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, cgoEnabled)
	for _, o := range ops {
		err := func() error {
			b, err := o.open(filepath.Join(base, o.name+"-check.db"))
			if err != nil {
				return err
			}
			defer b.close()
			rows := make([]plant, 2)
			makeRows(rows, 1)
			if err := b.insert(rows); err != nil {
				return fmt.Errorf("insert: %w", err)
			}
			p, ok, err := b.get(2)
			if err != nil || !ok || p.Name != rows[1].Name || p.Tag == nil || *p.Tag != benchTag {
				return fmt.Errorf("get: %v %v %+v", ok, err, p)
			}
			page, err := b.list(1, pageRows, nil)
			if err != nil || len(page) != 2 || page[1].ID != 2 {
				return fmt.Errorf("list: %v %+v", err, page)
			}
			return nil
		}()
		if err != nil {
			fmt.Printf("%-15s FAIL %v\n", o.name, err)
			code = 1
		} else {
			fmt.Printf("%-15s ok\n", o.name)
		}
	}
	return code
}

// settings reports what the binding's connection actually runs with.
func settings(b binding) string {
	var parts []string
	for _, q := range []string{"sqlite_version()", "journal_mode", "synchronous", "cache_size", "page_size", "mmap_size", "foreign_keys", "busy_timeout"} {
		query := "PRAGMA " + q
		if strings.HasSuffix(q, ")") {
			query = "SELECT " + q
		}
		v, err := b.scalar(query)
		if err != nil {
			v = "err:" + err.Error()
		}
		parts = append(parts, q+"="+v)
	}
	return strings.Join(parts, " ")
}

// fill creates a database of n plants with ids 1..n using b.
func fill(b binding, n int) error {
	rows := make([]plant, 256)
	for first := 1; first <= n; first += len(rows) {
		batch := rows[:min(len(rows), n-first+1)]
		makeRows(batch, int64(first))
		if err := b.insert(batch); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

func run(base string, ops []opener, dur time.Duration, reps int) {
	host, _ := os.Hostname()
	fmt.Printf("go %s %s/%s GOMAXPROCS=%d NumCPU=%d host=%s cgo-enabled=%s\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), runtime.NumCPU(), host, cgoEnabled)
	fmt.Printf("cpu: %s\n", cpuModel())
	fmt.Printf("dir=%s dur=%s reps=%d tagindex=%v\n", base, dur, reps, tagIndex)

	// The read databases are written once (by the first binding) and
	// copied for each binding, so every binding reads the same file.
	seed := map[int]string{}
	for _, n := range []int{pointRows, listRows} {
		path := filepath.Join(base, fmt.Sprintf("seed-%d.db", n))
		b, err := ops[0].open(path)
		if err != nil {
			fatalf("seed: %v", err)
		}
		if err := fill(b, n); err != nil {
			fatalf("seed: %v", err)
		}
		if err := b.close(); err != nil {
			fatalf("seed: %v", err)
		}
		seed[n] = path
	}

	// Random ids and page starts, the same sequence for every binding.
	rng := rand.New(rand.NewPCG(1, 2))
	const mask = 1<<16 - 1
	pointIDs := make([]int64, mask+1)
	pageStarts := make([]int64, mask+1)
	for i := range pointIDs {
		pointIDs[i] = 1 + rng.Int64N(pointRows)
		pageStarts[i] = 1 + rng.Int64N(listRows-pageRows+1)
	}

	for _, o := range ops {
		b, err := o.open(filepath.Join(base, o.name+"-settings.db"))
		if err != nil {
			fatalf("%s: %v", o.name, err)
		}
		fmt.Printf("settings %-15s %s\n", o.name, settings(b))
		b.close()
	}

	var all []result
	report := func(r result) {
		all = append(all, r)
		fmt.Printf("rep %-15s %-10s %8.2f µs/%s wall %8.2f µs/%s cpu %8.1f allocs/%s %9.0f B/%s %6.3f goroutines/%s (%d %ss, %d preempted)\n",
			r.binding, r.what, r.perWall(), r.unit, r.perCPU(), r.unit, r.perAllocs(), r.unit, r.perBytes(), r.unit, r.perGoroutines(), r.unit, r.units, r.unit, r.preempted)
	}
	for rep := 1; rep <= reps; rep++ {
		fmt.Printf("--- repetition %d\n", rep)
		for _, o := range ops {
			if err := runBinding(o, base, rep, seed, pointIDs, pageStarts, dur, report); err != nil {
				fatalf("%s: %v", o.name, err)
			}
		}
	}
	summarize(all, ops)
}

func runBinding(o opener, base string, rep int, seed map[int]string, pointIDs, pageStarts []int64, dur time.Duration, report func(result)) error {
	const mask = 1<<16 - 1
	// Writes: a new database each time.
	path := filepath.Join(base, fmt.Sprintf("%s-write-%d.db", o.name, rep))
	b, err := o.open(path)
	if err != nil {
		return err
	}
	next := int64(1)
	for _, n := range []int{64, 1} {
		rows := make([]plant, n)
		r, err := measure(dur, n, func(int) error {
			makeRows(rows, next)
			next += int64(n)
			return b.insert(rows)
		})
		if err != nil {
			b.close()
			return fmt.Errorf("insert%d: %w", n, err)
		}
		r.binding, r.what, r.unit = o.name, fmt.Sprintf("insert%d", n), "row"
		if n == 1 {
			r.unit = "commit"
		}
		report(r)
	}
	if err := b.close(); err != nil {
		return err
	}
	os.Remove(path)
	os.Remove(path + "-wal")
	os.Remove(path + "-shm")

	// Point reads.
	path = filepath.Join(base, fmt.Sprintf("%s-point-%d.db", o.name, rep))
	if err := copyFile(seed[pointRows], path); err != nil {
		return err
	}
	if b, err = o.open(path); err != nil {
		return err
	}
	r, err := measure(dur, 1, func(i int) error {
		id := pointIDs[i&mask]
		p, ok, err := b.get(id)
		if err == nil && (!ok || p.ID != id) {
			err = fmt.Errorf("plant %d: found %v %+v", id, ok, p)
		}
		return err
	})
	b.close()
	if err != nil {
		return fmt.Errorf("get: %w", err)
	}
	r.binding, r.what, r.unit = o.name, "get", "read"
	report(r)

	// List pages.
	path = filepath.Join(base, fmt.Sprintf("%s-list-%d.db", o.name, rep))
	if err := copyFile(seed[listRows], path); err != nil {
		return err
	}
	if b, err = o.open(path); err != nil {
		return err
	}
	var page []plant
	r, err = measure(dur, 1, func(i int) error {
		from := pageStarts[i&mask]
		var err error
		page, err = b.list(from, pageRows, page[:0])
		if err == nil && (len(page) != pageRows || page[0].ID != from || page[pageRows-1].Tag == nil) {
			err = fmt.Errorf("page from %d: %d rows", from, len(page))
		}
		return err
	})
	b.close()
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	r.binding, r.what, r.unit = o.name, "list101", "page"
	report(r)
	return nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func summarize(all []result, ops []opener) {
	whats := []string{"insert64", "insert1", "get", "list101"}
	units := map[string]string{"insert64": "row", "insert1": "commit", "get": "read", "list101": "page"}
	type stats struct{ wall, cpu, cpuMin, cpuMax, allocs, bytes, goroutines float64 }
	type key struct{ binding, what string }
	med := map[key]stats{}
	for _, o := range ops {
		for _, w := range whats {
			var wall, cpu, allocs, bytes, gor []float64
			for _, r := range all {
				if r.binding == o.name && r.what == w {
					wall = append(wall, r.perWall())
					cpu = append(cpu, r.perCPU())
					allocs = append(allocs, r.perAllocs())
					bytes = append(bytes, r.perBytes())
					gor = append(gor, r.perGoroutines())
				}
			}
			if len(cpu) == 0 {
				continue
			}
			med[key{o.name, w}] = stats{median(wall), median(cpu), slices.Min(cpu), slices.Max(cpu), median(allocs), median(bytes), median(gor)}
		}
	}
	ref := ops[0].name
	fmt.Printf("\n=== medians (GOMAXPROCS=%d); ratio = this / %s; cpu min-max over repetitions; allocs and bytes are Go heap only\n", runtime.GOMAXPROCS(0), ref)
	for _, w := range whats {
		u := units[w]
		fmt.Printf("%s (per %s)\n", w, u)
		fmt.Printf("  %-15s %9s %6s %9s %6s %17s %8s %8s %10s\n", "binding", "wall µs", "ratio", "cpu µs", "ratio", "cpu min-max", "allocs", "bytes", "goroutines")
		r0 := med[key{ref, w}]
		for _, o := range ops {
			m := med[key{o.name, w}]
			fmt.Printf("  %-15s %9.2f %6.2f %9.2f %6.2f %8.2f-%-8.2f %8.1f %8.0f %10.3f\n", o.name, m.wall, m.wall/r0.wall, m.cpu, m.cpu/r0.cpu, m.cpuMin, m.cpuMax, m.allocs, m.bytes, m.goroutines)
		}
	}
}

func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if name, ok := strings.CutPrefix(line, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(name), ":"))
		}
	}
	return "?"
}
