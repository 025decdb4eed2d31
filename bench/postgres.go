package main

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgreSQL mode (-postgres URL): for each instance count, the harness
// creates a fresh database on the server, issues a token in it, and starts
// that many "plantstore serve" processes on it. At the end it stops them
// and drops the database.

// startPostgres creates a database and starts n instances of plantstore
// on it. stop stops the instances and drops the database; call it even
// when err is not nil.
func startPostgres(c config, dir string, n int) (t target, stop func(), err error) {
	name := "plantstore_bench_" + randomHex(6)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// template0 takes no connections; UTF8 is what plantstore needs.
	if err := adminExec(ctx, c.postgres, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE template0 ENCODING 'UTF8'"); err != nil {
		return target{}, func() {}, fmt.Errorf("-postgres: create database %s: %w", name, err)
	}
	fmt.Printf("PostgreSQL: created database %s for %d instance(s)\n", name, n)
	var servers []*process
	stop = func() {
		for _, s := range servers {
			s.stop()
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := adminExec(ctx, c.postgres, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			fmt.Printf("PostgreSQL: could not drop database %s (drop it by hand): %v\n", name, err)
			return
		}
		fmt.Printf("PostgreSQL: dropped database %s\n", name)
	}
	db, err := databaseURL(c.postgres, name)
	if err != nil {
		return target{}, stop, err
	}
	// The token first: it also creates the schema, before the instances
	// start.
	token, err := createToken(c, db)
	if err != nil {
		return target{}, stop, err
	}
	var args []string
	if c.pgMaxConns > 0 {
		args = append(args, "--db-max-conns", strconv.Itoa(c.pgMaxConns))
	}
	label := "plantstore (postgres, 1 instance)"
	if n > 1 {
		label = fmt.Sprintf("plantstore (postgres, %d instances)", n)
	}
	t = target{name: label, token: token, engine: "postgres", instances: n}
	for i := range n {
		s, err := startPlantstoreLog(c, dir, db, fmt.Sprintf("serve-pg%d-%d.log", n, i), args...)
		if err != nil {
			return target{}, stop, fmt.Errorf("%s: %w", label, err)
		}
		servers = append(servers, s)
		t.urls = append(t.urls, s.url)
		t.pids = append(t.pids, s.cmd.Process.Pid)
	}
	t.url, t.pid = t.urls[0], t.pids[0]
	return t, stop, nil
}

// databaseURL is the admin URL with its database replaced by name.
func databaseURL(admin, name string) (string, error) {
	u, err := url.Parse(admin)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		// Not quoted: the URL may hold a password.
		return "", fmt.Errorf("-postgres: not a postgres:// URL")
	}
	u.Path = "/" + name
	q := u.Query()
	if q.Has("dbname") || q.Has("database") {
		q.Del("database")
		q.Set("dbname", name)
		u.RawQuery = q.Encode()
	}
	return u.String(), nil
}

// adminExec runs one statement on a connection of its own: CREATE and
// DROP DATABASE cannot run in a transaction.
func adminExec(ctx context.Context, admin, sql string) error {
	if !strings.HasPrefix(strings.ToLower(admin), "postgres://") && !strings.HasPrefix(strings.ToLower(admin), "postgresql://") {
		return fmt.Errorf("-postgres: not a postgres:// URL")
	}
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// poolSize describes each instance's pool, for the output.
func poolSize(c config) string {
	if c.pgMaxConns > 0 {
		return fmt.Sprintf("--db-max-conns %d", c.pgMaxConns)
	}
	return "plantstore's default size (--db-max-conns 0)"
}
