package sqlite

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
)

// rawConn drives one SQLite connection below database/sql, for the hot
// paths: the writer's batches and the plant reads. Its statements run
// with context.Background(), which modernc's driver takes as "cannot be
// cancelled" and so starts no goroutine to watch. Through database/sql a
// transaction always derives a cancellable context, and then the driver
// starts a goroutine per statement and database/sql one per transaction:
// on one core those crowd the run queue between the handlers and the
// writer (BENCHMARKS.md, "One core"). Nothing on these paths needs
// cancelling mid-statement: a write batch must run to its end, and a
// read is one bounded query.
//
// A rawConn is used by one goroutine at a time.
type rawConn struct {
	conn  driver.Conn
	stmts map[string]rawStmt
	args  []driver.NamedValue // reused for each statement's arguments
}

// rawStmt is a prepared statement; modernc's implements both.
type rawStmt interface {
	driver.StmtExecContext
	driver.StmtQueryContext
	Close() error
}

func newRawConn(conn driver.Conn) *rawConn {
	return &rawConn{conn: conn, stmts: make(map[string]rawStmt)}
}

// prepare returns the statement for query, prepared once per connection.
func (c *rawConn) prepare(query string) (rawStmt, error) {
	if s, ok := c.stmts[query]; ok {
		return s, nil
	}
	prep, ok := c.conn.(driver.ConnPrepareContext)
	if !ok {
		return nil, errors.New("the SQLite driver cannot prepare statements with a context")
	}
	ds, err := prep.PrepareContext(context.Background(), query)
	if err != nil {
		return nil, err
	}
	s, ok := ds.(rawStmt)
	if !ok {
		ds.Close()
		return nil, fmt.Errorf("the SQLite driver's statements lack ExecContext or QueryContext")
	}
	c.stmts[query] = s
	return s, nil
}

// bind makes the driver's arguments of args: int64, string, []byte, nil,
// or a *string (nil for NULL).
func (c *rawConn) bind(args []any) []driver.NamedValue {
	c.args = c.args[:0]
	for i, a := range args {
		if s, ok := a.(*string); ok {
			if s == nil {
				a = nil
			} else {
				a = *s
			}
		}
		c.args = append(c.args, driver.NamedValue{Ordinal: i + 1, Value: a})
	}
	return c.args
}

// exec runs query (prepared once) with args and returns the number of rows
// it changed.
func (c *rawConn) exec(query string, args ...any) (int64, error) {
	s, err := c.prepare(query)
	if err != nil {
		return 0, err
	}
	res, err := s.ExecContext(context.Background(), c.bind(args))
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// execOnce runs query, without arguments, and does not keep it prepared:
// for a statement whose text changes from run to run (a PRAGMA's value),
// which exec would keep one of for each text.
func (c *rawConn) execOnce(query string) error {
	prep, ok := c.conn.(driver.ConnPrepareContext)
	if !ok {
		return errors.New("the SQLite driver cannot prepare statements with a context")
	}
	ds, err := prep.PrepareContext(context.Background(), query)
	if err != nil {
		return err
	}
	defer ds.Close()
	s, ok := ds.(driver.StmtExecContext)
	if !ok {
		return errors.New("the SQLite driver's statements lack ExecContext")
	}
	_, err = s.ExecContext(context.Background(), nil)
	return err
}

// query runs query (prepared once) with args and calls row with each row's
// values until it returns false or the rows end.
func (c *rawConn) query(query string, args []any, row func(values []driver.Value) bool) error {
	s, err := c.prepare(query)
	if err != nil {
		return err
	}
	rows, err := s.QueryContext(context.Background(), c.bind(args))
	if err != nil {
		return err
	}
	values := make([]driver.Value, len(rows.Columns()))
	for {
		if err := rows.Next(values); err != nil {
			rows.Close()
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if !row(values) {
			return rows.Close()
		}
	}
}

// close closes the statements; the connection is its owner's to close.
func (c *rawConn) closeStmts() {
	for q, s := range c.stmts {
		s.Close()
		delete(c.stmts, q)
	}
}

// readerPool holds the connections the plant reads run on, opened
// through the driver directly: a read takes one, runs one query, and gives
// it back. A buffered channel is the whole pool.
type readerPool chan *rawConn

func openReaders(connector driver.Connector, n int) (readerPool, error) {
	pool := make(readerPool, n)
	for range n {
		conn, err := connector.Connect(context.Background())
		if err != nil {
			pool.close()
			return nil, err
		}
		pool <- newRawConn(conn)
	}
	return pool, nil
}

// with runs fn on a reader, waiting for one as long as ctx allows.
func (p readerPool) with(ctx context.Context, fn func(*rawConn) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var c *rawConn
	select {
	case c = <-p:
	default:
		select {
		case c = <-p:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	defer func() { p <- c }()
	return fn(c)
}

// close closes every reader; none may be in use.
func (p readerPool) close() error {
	var errs []error
	for {
		select {
		case c := <-p:
			c.closeStmts()
			errs = append(errs, c.conn.Close())
		default:
			return errors.Join(errs...)
		}
	}
}
