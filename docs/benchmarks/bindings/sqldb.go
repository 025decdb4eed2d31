package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net/url"
)

// DSNs. modernc and ncruces take plantstore's "_pragma" parameters; mattn
// has its own names for the same settings. Every one asks for BEGIN
// IMMEDIATE transactions, as plantstore's writer does.

func pragmaDSN(path string) string {
	q := url.Values{"_pragma": {
		fmt.Sprintf("busy_timeout(%d)", busyMillis),
		"journal_mode(WAL)",
		"synchronous(FULL)",
		"foreign_keys(ON)",
	}}
	q.Set("_txlock", "immediate")
	u := url.URL{Scheme: "file", Path: path, RawQuery: q.Encode()}
	return u.String()
}

func mattnDSN(path string) string {
	q := url.Values{}
	q.Set("_busy_timeout", fmt.Sprint(busyMillis))
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "FULL")
	q.Set("_foreign_keys", "1")
	q.Set("_txlock", "immediate")
	u := url.URL{Scheme: "file", Path: path, RawQuery: q.Encode()}
	return u.String()
}

// ncrucesDriverName is the name the ncruces driver registers under. Both
// mattn and ncruces register "sqlite3"; run.sh renames ncruces's with
// -ldflags -X github.com/ncruces/go-sqlite3/driver.driverName=...
const ncrucesDriverName = "sqlite3-ncruces"

func openModerncSQL(path string) (binding, error) { return openSQL("sqlite", pragmaDSN(path)) }
func openMattnSQL(path string) (binding, error)   { return openSQL("sqlite3", mattnDSN(path)) }
func openNcrucesSQL(path string) (binding, error) {
	return openSQL(ncrucesDriverName, pragmaDSN(path))
}
func openModerncRaw(path string) (binding, error) { return openRaw("sqlite", pragmaDSN(path)) }
func openMattnRaw(path string) (binding, error)   { return openRaw("sqlite3", mattnDSN(path)) }

// sqlBinding drives a driver through database/sql the way plantstore does
// today: one pooled connection, statements prepared on the *sql.DB, a
// *sql.Tx from BeginTx, tx.StmtContext, and a cancellable context (like
// plantstore's db.life or a request's context) on every call.
type sqlBinding struct {
	db                *sql.DB
	ctx               context.Context
	cancel            context.CancelFunc
	inserts           map[int]*sql.Stmt
	getStmt, listStmt *sql.Stmt
	args              []any
}

func openSQLDB(driverName, dsn string) (*sql.DB, error) {
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxIdleTime(0)
	for _, q := range schema() {
		if _, err := db.Exec(q); err != nil {
			db.Close()
			return nil, err
		}
	}
	return db, nil
}

func openSQL(driverName, dsn string) (binding, error) {
	db, err := openSQLDB(driverName, dsn)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &sqlBinding{db: db, ctx: ctx, cancel: cancel, inserts: map[int]*sql.Stmt{}}
	if b.getStmt, err = db.PrepareContext(ctx, getSQL); err == nil {
		b.listStmt, err = db.PrepareContext(ctx, listSQL)
	}
	if err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

func nullString(s *string) sql.NullString {
	if s == nil {
		return sql.NullString{}
	}
	return sql.NullString{String: *s, Valid: true}
}

func (b *sqlBinding) insert(rows []plant) error {
	stmt := b.inserts[len(rows)]
	if stmt == nil {
		var err error
		if stmt, err = b.db.PrepareContext(b.ctx, multiInsertSQL(len(rows))); err != nil {
			return err
		}
		b.inserts[len(rows)] = stmt
	}
	tx, err := b.db.BeginTx(b.ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	args := b.args[:0]
	for _, r := range rows {
		args = append(args, r.ID, r.Name, nullString(r.Tag), r.CreatedAt)
	}
	b.args = args[:0]
	if _, err := tx.StmtContext(b.ctx, stmt).ExecContext(b.ctx, args...); err != nil {
		return err
	}
	return tx.Commit()
}

func (b *sqlBinding) get(id int64) (plant, bool, error) {
	p := plant{ID: id}
	var tag sql.NullString
	err := b.getStmt.QueryRowContext(b.ctx, id).Scan(&p.Name, &tag)
	if errors.Is(err, sql.ErrNoRows) {
		return plant{}, false, nil
	}
	if err != nil {
		return plant{}, false, err
	}
	if tag.Valid {
		p.Tag = &tag.String
	}
	return p, true, nil
}

func (b *sqlBinding) list(from int64, limit int, out []plant) ([]plant, error) {
	rows, err := b.listStmt.QueryContext(b.ctx, from, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var p plant
		var tag sql.NullString
		if err := rows.Scan(&p.ID, &p.Name, &tag); err != nil {
			return nil, err
		}
		if tag.Valid {
			p.Tag = &tag.String
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

func (b *sqlBinding) scalar(query string) (string, error) {
	var s string
	err := b.db.QueryRowContext(b.ctx, query).Scan(&s)
	return s, err
}

func (b *sqlBinding) close() error {
	for _, s := range b.inserts {
		s.Close()
	}
	if b.getStmt != nil {
		b.getStmt.Close()
	}
	if b.listStmt != nil {
		b.listStmt.Close()
	}
	b.cancel()
	return b.db.Close()
}

// rawBinding opens the driver through database/sql but drives the driver
// connection itself, inside sql.Conn.Raw, with context.Background(): the
// driver sees a context that can never be cancelled, so it needs no
// watcher for it.
type rawBinding struct {
	db                *sql.DB
	conn              *sql.Conn
	inserts           map[int]driver.Stmt
	getStmt, listStmt driver.Stmt
	nv                []driver.NamedValue
	dest              []driver.Value
}

func openRaw(driverName, dsn string) (binding, error) {
	db, err := openSQLDB(driverName, dsn)
	if err != nil {
		return nil, err
	}
	b := &rawBinding{db: db, inserts: map[int]driver.Stmt{}, dest: make([]driver.Value, 3)}
	if b.conn, err = db.Conn(context.Background()); err == nil {
		err = b.conn.Raw(func(dc any) error {
			var err error
			if b.getStmt, err = prepareRaw(dc, getSQL); err != nil {
				return err
			}
			b.listStmt, err = prepareRaw(dc, listSQL)
			return err
		})
	}
	if err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

func prepareRaw(dc any, query string) (driver.Stmt, error) {
	if p, ok := dc.(driver.ConnPrepareContext); ok {
		return p.PrepareContext(context.Background(), query)
	}
	return dc.(driver.Conn).Prepare(query)
}

func tagValue(s *string) driver.Value {
	if s == nil {
		return nil
	}
	return *s
}

func (b *rawBinding) insert(rows []plant) error {
	return b.conn.Raw(func(dc any) error {
		bg := context.Background()
		stmt := b.inserts[len(rows)]
		if stmt == nil {
			var err error
			if stmt, err = prepareRaw(dc, multiInsertSQL(len(rows))); err != nil {
				return err
			}
			b.inserts[len(rows)] = stmt
		}
		tx, err := dc.(driver.ConnBeginTx).BeginTx(bg, driver.TxOptions{})
		if err != nil {
			return err
		}
		nv := b.nv[:0]
		for i, r := range rows {
			nv = append(nv,
				driver.NamedValue{Ordinal: 4*i + 1, Value: r.ID},
				driver.NamedValue{Ordinal: 4*i + 2, Value: r.Name},
				driver.NamedValue{Ordinal: 4*i + 3, Value: tagValue(r.Tag)},
				driver.NamedValue{Ordinal: 4*i + 4, Value: r.CreatedAt})
		}
		b.nv = nv[:0]
		if _, err := stmt.(driver.StmtExecContext).ExecContext(bg, nv); err != nil {
			tx.Rollback()
			return err
		}
		return tx.Commit()
	})
}

// text converts a TEXT column's driver value (string or []byte, which the
// driver may reuse) to a Go string; ok is false for NULL.
func text(v driver.Value) (string, bool, error) {
	switch v := v.(type) {
	case string:
		return v, true, nil
	case []byte:
		return string(v), true, nil
	case nil:
		return "", false, nil
	}
	return "", false, fmt.Errorf("unexpected %T for a text column", v)
}

func (b *rawBinding) get(id int64) (p plant, ok bool, err error) {
	err = b.conn.Raw(func(dc any) error {
		if len(b.nv) < 1 {
			b.nv = make([]driver.NamedValue, 2)
		}
		nv := b.nv[:1]
		nv[0] = driver.NamedValue{Ordinal: 1, Value: id}
		rows, err := b.getStmt.(driver.StmtQueryContext).QueryContext(context.Background(), nv)
		if err != nil {
			return err
		}
		defer rows.Close()
		dest := b.dest[:2]
		if err := rows.Next(dest); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		p.ID = id
		var valid bool
		if p.Name, _, err = text(dest[0]); err != nil {
			return err
		}
		tag, valid, err := text(dest[1])
		if err != nil {
			return err
		}
		if valid {
			p.Tag = &tag
		}
		ok = true
		return nil
	})
	return p, ok, err
}

func (b *rawBinding) list(from int64, limit int, out []plant) ([]plant, error) {
	err := b.conn.Raw(func(dc any) error {
		if len(b.nv) < 2 {
			b.nv = make([]driver.NamedValue, 2)
		}
		nv := b.nv[:2]
		nv[0] = driver.NamedValue{Ordinal: 1, Value: from}
		nv[1] = driver.NamedValue{Ordinal: 2, Value: int64(limit)}
		rows, err := b.listStmt.(driver.StmtQueryContext).QueryContext(context.Background(), nv)
		if err != nil {
			return err
		}
		defer rows.Close()
		dest := b.dest[:3]
		for {
			if err := rows.Next(dest); err == io.EOF {
				return nil
			} else if err != nil {
				return err
			}
			id, ok := dest[0].(int64)
			if !ok {
				return fmt.Errorf("unexpected %T for id", dest[0])
			}
			p := plant{ID: id}
			if p.Name, _, err = text(dest[1]); err != nil {
				return err
			}
			tag, valid, err := text(dest[2])
			if err != nil {
				return err
			}
			if valid {
				p.Tag = &tag
			}
			out = append(out, p)
		}
	})
	return out, err
}

func (b *rawBinding) scalar(query string) (string, error) {
	var s string
	err := b.conn.QueryRowContext(context.Background(), query).Scan(&s)
	return s, err
}

func (b *rawBinding) close() error {
	if b.conn != nil {
		b.conn.Raw(func(any) error {
			for _, s := range b.inserts {
				s.Close()
			}
			if b.getStmt != nil {
				b.getStmt.Close()
			}
			if b.listStmt != nil {
				b.listStmt.Close()
			}
			return nil
		})
		b.conn.Close()
	}
	return b.db.Close()
}
