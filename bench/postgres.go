package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/plantstore/plantstore/internal/postgres/pgtest"
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
	db, err := pgtest.CreateDatabase(ctx, c.postgres, name)
	if err != nil {
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
		if err := pgtest.DropDatabase(ctx, c.postgres, name); err != nil {
			fmt.Printf("PostgreSQL: could not drop database %s (drop it by hand): %v\n", name, err)
			return
		}
		fmt.Printf("PostgreSQL: dropped database %s\n", name)
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
		s, err := startPlantstoreLog(c, dir, db, fmt.Sprintf("serve-pg%d-%d.log", n, i), nil, args...)
		if err != nil {
			return target{}, stop, fmt.Errorf("%s: %w", label, err)
		}
		servers = append(servers, s)
		t.urls = append(t.urls, s.url)
		t.pids = append(t.pids, s.cmd.Process.Pid)
		if s.metricsURL != "" {
			t.metrics = append(t.metrics, s.metricsURL)
		}
	}
	t.url, t.pid = t.urls[0], t.pids[0]
	return t, stop, nil
}

// poolSize describes each instance's pool, for the output.
func poolSize(c config) string {
	if c.pgMaxConns > 0 {
		return fmt.Sprintf("--db-max-conns %d", c.pgMaxConns)
	}
	return "plantstore's default size (--db-max-conns 0)"
}
