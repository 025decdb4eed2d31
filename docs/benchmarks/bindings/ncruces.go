package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ncruces/go-sqlite3"
)

// ncrucesBinding uses github.com/ncruces/go-sqlite3's own API (SQLite
// compiled to Wasm, then translated to Go by wasm2go): prepared statements,
// Bind*, Step, Reset. Cancellation is conn.SetInterrupt(ctx): SQLite's
// progress handler polls ctx.Err(), and Step checks it first; no goroutine.
type ncrucesBinding struct {
	conn    *sqlite3.Conn
	cancel  context.CancelFunc
	begin   *sqlite3.Stmt
	commit  *sqlite3.Stmt
	get1    *sqlite3.Stmt
	list1   *sqlite3.Stmt
	inserts map[int]*sqlite3.Stmt
}

func openNcrucesDirect(path string) (binding, error) {
	conn, err := sqlite3.Open(path)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &ncrucesBinding{conn: conn, cancel: cancel, inserts: map[int]*sqlite3.Stmt{}}
	conn.SetInterrupt(ctx)
	if err := conn.BusyTimeout(busyMillis * time.Millisecond); err != nil {
		b.close()
		return nil, err
	}
	for _, q := range append([]string{"PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL", "PRAGMA foreign_keys=ON"}, schema()...) {
		if err := conn.Exec(q); err != nil {
			b.close()
			return nil, fmt.Errorf("%s: %w", q, err)
		}
	}
	for _, s := range []struct {
		stmt  **sqlite3.Stmt
		query string
	}{{&b.begin, "BEGIN IMMEDIATE"}, {&b.commit, "COMMIT"}, {&b.get1, getSQL}, {&b.list1, listSQL}} {
		if *s.stmt, _, err = conn.Prepare(s.query); err != nil {
			b.close()
			return nil, err
		}
	}
	return b, nil
}

func (b *ncrucesBinding) insert(rows []plant) (err error) {
	stmt := b.inserts[len(rows)]
	if stmt == nil {
		if stmt, _, err = b.conn.Prepare(multiInsertSQL(len(rows))); err != nil {
			return err
		}
		b.inserts[len(rows)] = stmt
	}
	if err := b.begin.Exec(); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			b.conn.Exec("ROLLBACK")
		}
	}()
	for i, r := range rows {
		if err := stmt.BindInt64(4*i+1, r.ID); err != nil {
			return err
		}
		if err := stmt.BindText(4*i+2, r.Name); err != nil {
			return err
		}
		if r.Tag == nil {
			err = stmt.BindNull(4*i + 3)
		} else {
			err = stmt.BindText(4*i+3, *r.Tag)
		}
		if err != nil {
			return err
		}
		if err := stmt.BindInt64(4*i+4, r.CreatedAt); err != nil {
			return err
		}
	}
	if err := stmt.Exec(); err != nil {
		return err
	}
	return b.commit.Exec()
}

func (b *ncrucesBinding) get(id int64) (plant, bool, error) {
	stmt := b.get1
	if err := stmt.BindInt64(1, id); err != nil {
		return plant{}, false, err
	}
	if !stmt.Step() {
		return plant{}, false, stmt.Reset()
	}
	p := plant{ID: id, Name: stmt.ColumnText(0)}
	if stmt.ColumnType(1) != sqlite3.NULL {
		tag := stmt.ColumnText(1)
		p.Tag = &tag
	}
	return p, true, stmt.Reset()
}

func (b *ncrucesBinding) list(from int64, limit int, out []plant) ([]plant, error) {
	stmt := b.list1
	if err := stmt.BindInt64(1, from); err != nil {
		return nil, err
	}
	if err := stmt.BindInt64(2, int64(limit)); err != nil {
		return nil, err
	}
	for stmt.Step() {
		p := plant{ID: stmt.ColumnInt64(0), Name: stmt.ColumnText(1)}
		if stmt.ColumnType(2) != sqlite3.NULL {
			tag := stmt.ColumnText(2)
			p.Tag = &tag
		}
		out = append(out, p)
	}
	if err := stmt.Reset(); err != nil {
		return nil, err
	}
	return out, nil
}

func (b *ncrucesBinding) scalar(query string) (string, error) {
	stmt, _, err := b.conn.Prepare(query)
	if err != nil {
		return "", err
	}
	defer stmt.Close()
	if !stmt.Step() {
		if err := stmt.Err(); err != nil {
			return "", err
		}
		return "", errors.New("no row")
	}
	return stmt.ColumnText(0), nil
}

func (b *ncrucesBinding) close() error {
	for _, s := range b.inserts {
		s.Close()
	}
	for _, s := range []*sqlite3.Stmt{b.begin, b.commit, b.get1, b.list1} {
		if s != nil {
			s.Close()
		}
	}
	err := b.conn.Close()
	b.cancel()
	return err
}
