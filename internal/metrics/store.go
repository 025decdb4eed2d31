package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plantstore/plantstore"
)

// InstrumentStore wraps s so that every operation's time is recorded by
// operation and outcome. It adds two clock reads and a histogram update
// per call.
func (m *Metrics) InstrumentStore(s plantstore.Store) plantstore.Store {
	return &instrumented{Store: s, m: m}
}

type instrumented struct {
	plantstore.Store
	m *Metrics
}

// observe records an operation that started at start and ended with *err
// (a pointer: it is deferred before the operation sets it).
func (s *instrumented) observe(op string, start time.Time, errp *error) {
	err := *errp
	outcome := "ok"
	if err != nil {
		outcome = string(plantstore.ErrorCode(err))
		if outcome == "" {
			outcome = string(plantstore.EINTERNAL)
		}
	}
	resolved(&s.m.storeChildren, storeLabels{op, outcome}, func() prometheus.Observer {
		return s.m.storeDuration.WithLabelValues(op, outcome)
	}).Observe(time.Since(start).Seconds())
}

func (s *instrumented) CreatePlant(ctx context.Context, p plantstore.Plant) (created bool, err error) {
	defer s.observe("create_plant", time.Now(), &err)
	return s.Store.CreatePlant(ctx, p)
}

func (s *instrumented) GetPlant(ctx context.Context, id int64) (p plantstore.Plant, err error) {
	defer s.observe("get_plant", time.Now(), &err)
	return s.Store.GetPlant(ctx, id)
}

func (s *instrumented) ListPlants(ctx context.Context, opts plantstore.ListOptions) (ps []plantstore.Plant, err error) {
	defer s.observe("list_plants", time.Now(), &err)
	return s.Store.ListPlants(ctx, opts)
}

func (s *instrumented) UpdatePlant(ctx context.Context, p plantstore.Plant, cond plantstore.Precondition) (err error) {
	defer s.observe("update_plant", time.Now(), &err)
	return s.Store.UpdatePlant(ctx, p, cond)
}

func (s *instrumented) DeletePlant(ctx context.Context, id int64, cond plantstore.Precondition) (err error) {
	defer s.observe("delete_plant", time.Now(), &err)
	return s.Store.DeletePlant(ctx, id, cond)
}

func (s *instrumented) Events(ctx context.Context, q plantstore.EventQuery) (es []plantstore.Event, err error) {
	defer s.observe("events", time.Now(), &err)
	return s.Store.Events(ctx, q)
}

func (s *instrumented) TokenByHash(ctx context.Context, hash plantstore.TokenHash) (t plantstore.Token, err error) {
	defer s.observe("token_by_hash", time.Now(), &err)
	return s.Store.TokenByHash(ctx, hash)
}

func (s *instrumented) Ping(ctx context.Context) (err error) {
	defer s.observe("ping", time.Now(), &err)
	return s.Store.Ping(ctx)
}
