package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"zombiezen.com/go/sqlite"
)

// zombiezenBinding uses zombiezen.com/go/sqlite's own API on the same
// transpiled SQLite (modernc.org/sqlite/lib): statements cached by
// conn.Prep, Bind*, Step, Reset. The connection's interrupt channel is set
// once, to a channel that lives as long as the connection (like
// plantstore's db.life); zombiezen starts one goroutine per SetInterrupt
// call and checks the channel without blocking before each step.
type zombiezenBinding struct {
	conn   *sqlite.Conn
	cancel context.CancelFunc
	begin  *sqlite.Stmt
	commit *sqlite.Stmt
}

func openZombiezen(path string) (binding, error) {
	conn, err := sqlite.OpenConn(path, sqlite.OpenReadWrite|sqlite.OpenCreate|sqlite.OpenWAL|sqlite.OpenNoMutex)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &zombiezenBinding{conn: conn, cancel: cancel}
	conn.SetInterrupt(ctx.Done())
	conn.SetBusyTimeout(busyMillis * time.Millisecond)
	for _, q := range append([]string{"PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL", "PRAGMA foreign_keys=ON"}, schema()...) {
		if err := b.exec(q); err != nil {
			b.close()
			return nil, fmt.Errorf("%s: %w", q, err)
		}
	}
	b.begin = conn.Prep("BEGIN IMMEDIATE")
	b.commit = conn.Prep("COMMIT")
	return b, nil
}

// exec runs a one-off statement, stepping through any rows.
func (b *zombiezenBinding) exec(query string) error {
	stmt, _, err := b.conn.PrepareTransient(query)
	if err != nil {
		return err
	}
	defer stmt.Finalize()
	for {
		row, err := stmt.Step()
		if err != nil || !row {
			return err
		}
	}
}

func stepDone(stmt *sqlite.Stmt) error {
	_, err := stmt.Step()
	if rerr := stmt.Reset(); err == nil {
		err = rerr
	}
	return err
}

func (b *zombiezenBinding) insert(rows []plant) (err error) {
	stmt := b.conn.Prep(multiInsertSQL(len(rows)))
	if err := stepDone(b.begin); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			b.exec("ROLLBACK")
		}
	}()
	for i, r := range rows {
		stmt.BindInt64(4*i+1, r.ID)
		stmt.BindText(4*i+2, r.Name)
		if r.Tag == nil {
			stmt.BindNull(4*i + 3)
		} else {
			stmt.BindText(4*i+3, *r.Tag)
		}
		stmt.BindInt64(4*i+4, r.CreatedAt)
	}
	if err := stepDone(stmt); err != nil {
		return err
	}
	return stepDone(b.commit)
}

func (b *zombiezenBinding) get(id int64) (plant, bool, error) {
	stmt := b.conn.Prep(getSQL)
	defer stmt.Reset()
	stmt.BindInt64(1, id)
	row, err := stmt.Step()
	if err != nil || !row {
		return plant{}, false, err
	}
	p := plant{ID: id, Name: stmt.ColumnText(0)}
	if stmt.ColumnType(1) != sqlite.TypeNull {
		tag := stmt.ColumnText(1)
		p.Tag = &tag
	}
	return p, true, nil
}

func (b *zombiezenBinding) list(from int64, limit int, out []plant) ([]plant, error) {
	stmt := b.conn.Prep(listSQL)
	defer stmt.Reset()
	stmt.BindInt64(1, from)
	stmt.BindInt64(2, int64(limit))
	for {
		row, err := stmt.Step()
		if err != nil {
			return nil, err
		}
		if !row {
			return out, nil
		}
		p := plant{ID: stmt.ColumnInt64(0), Name: stmt.ColumnText(1)}
		if stmt.ColumnType(2) != sqlite.TypeNull {
			tag := stmt.ColumnText(2)
			p.Tag = &tag
		}
		out = append(out, p)
	}
}

func (b *zombiezenBinding) scalar(query string) (string, error) {
	stmt, _, err := b.conn.PrepareTransient(query)
	if err != nil {
		return "", err
	}
	defer stmt.Finalize()
	row, err := stmt.Step()
	if err != nil {
		return "", err
	}
	if !row {
		return "", errors.New("no row")
	}
	return stmt.ColumnText(0), nil
}

func (b *zombiezenBinding) close() error {
	err := b.conn.Close()
	b.cancel()
	return err
}
