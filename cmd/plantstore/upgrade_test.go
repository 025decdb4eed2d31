package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/plantstore/plantstore/internal/apitest"
)

// The SQLite stores that earlier versions wrote, with what they hold
// (internal/sqlite/testdata/upgrade/README.md).
const upgradeFixtures = "../../internal/sqlite/testdata/upgrade"

type upgradeFixture struct {
	SchemaVersion int `json:"schema_version"`
	Tokens        []struct {
		Name    string `json:"name"`
		Secret  string `json:"secret"`
		Revoked bool   `json:"revoked"`
	} `json:"tokens"`
	Plants []upgradePlant `json:"plants"`
}

type upgradePlant struct {
	ID   int64   `json:"id"`
	Name string  `json:"name"`
	Tag  *string `json:"tag,omitempty"`
}

func (f upgradeFixture) secret(name string, revoked bool) string {
	for _, tok := range f.Tokens {
		if tok.Name == name && tok.Revoked == revoked {
			return tok.Secret
		}
	}
	panic(fmt.Sprintf("no token %s (revoked %v) in the fixture", name, revoked))
}

// An upgrade as the README tells it: the new binary started on a store an
// earlier one wrote. Its tokens work as they did, its plants are served,
// and the commands of this version work on it.
func TestUpgradeServesEarlierStores(t *testing.T) {
	fixtures, err := filepath.Glob(filepath.Join(upgradeFixtures, "v*.json"))
	if err != nil || len(fixtures) == 0 {
		t.Fatalf("no fixtures in %s: %v", upgradeFixtures, err)
	}
	for _, manifest := range fixtures {
		name := strings.TrimSuffix(filepath.Base(manifest), ".json")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, err := os.ReadFile(manifest)
			if err != nil {
				t.Fatal(err)
			}
			var f upgradeFixture
			if err := json.Unmarshal(b, &f); err != nil {
				t.Fatal(err)
			}
			store, err := os.ReadFile(strings.TrimSuffix(manifest, ".json") + ".db")
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "plantstore.db"), store, 0o600); err != nil {
				t.Fatal(err)
			}

			s := serve(t, dir)
			admin, reader := f.secret("fixture-admin", false), f.secret("fixture-reader", false)

			status, body := upgradeRequest(t, "GET", s.url+"/plants", reader, "")
			var got []upgradePlant
			if status != 200 || json.Unmarshal([]byte(body), &got) != nil {
				t.Fatalf("GET /plants: %d %s", status, body)
			}
			want := slices.Clone(f.Plants)
			slices.SortFunc(want, func(a, b upgradePlant) int { return cmp.Compare(a.ID, b.ID) })
			if fmt.Sprint(plantsText(got)) != fmt.Sprint(plantsText(want)) {
				t.Errorf("GET /plants = %v, want the fixture's %v", plantsText(got), plantsText(want))
			}
			if status, body := upgradeRequest(t, "GET", s.url+"/plants?tag=edge", reader, ""); status != 200 || strings.Count(body, `"tag":"edge"`) != 2 {
				t.Errorf("GET /plants?tag=edge: %d %s, want the two edge plants", status, body)
			}
			if status, _ := upgradeRequest(t, "POST", s.url+"/plants", reader, `{"id": 77, "name": "Moss"}`); status != 403 {
				t.Errorf("a create with the read-only fixture token: %d, want 403", status)
			}
			if status, _ := upgradeRequest(t, "GET", s.url+"/plants", f.secret("fixture-rotated", true), ""); status != 401 {
				t.Errorf("the fixture's revoked token: %d, want 401", status)
			}
			for _, w := range []struct {
				method, path, body string
				status             int
			}{
				{"POST", "/plants", `{"id": 77, "name": "Moss", "tag": "upgraded"}`, 200},
				{"PUT", "/plants/1", `{"name": "Monstera", "tag": "upgraded"}`, 200},
				{"DELETE", "/plants/-7", "", 204},
				{"GET", "/plants?tag=upgraded", "", 200},
			} {
				if status, body := upgradeRequest(t, w.method, s.url+w.path, admin, w.body); status != w.status {
					t.Errorf("%s %s with the fixture's admin token: %d %s", w.method, w.path, status, body)
				}
			}
			if status, body := upgradeRequest(t, "GET", s.url+"/plants?tag=upgraded", f.secret("fixture-rotated", false), ""); status != 200 ||
				!strings.Contains(body, `"id":1,"name":"Monstera"`) || !strings.Contains(body, `"id":77,"name":"Moss"`) {
				t.Errorf("the writes, read with the reissued token: %d %s", status, body)
			}
			checkUpgradedFeed(t, s.url, reader, f.SchemaVersion)

			// This version's commands on the upgraded store, beside the server.
			r := cli(t, dir, nil, "token", "list", "--all")
			if r.exit != 0 || strings.Count(r.stdout, "fixture-rotated") != 2 || !strings.Contains(r.stdout, "fixture-admin") {
				t.Errorf("token list --all: exit %d\n%s%s", r.exit, r.stdout, r.stderr)
			}
			if r := cli(t, dir, nil, "webhook", "add", "https://hooks.example/plants"); r.exit != 0 || !strings.HasPrefix(r.stdout, "whsec_") {
				t.Errorf("webhook add: exit %d\n%s%s", r.exit, r.stdout, r.stderr)
			}
			if r := cli(t, dir, nil, "webhook", "list"); r.exit != 0 || !strings.Contains(r.stdout, "https://hooks.example/") {
				t.Errorf("webhook list: exit %d\n%s%s", r.exit, r.stdout, r.stderr)
			}
		})
	}
}

// checkUpgradedFeed reads GET /events after the writes above: the
// fixture's own events first (the feed came with schema 4: the eight
// creates, the two updates and the delete of make.sh), in id order from
// 1, then the three writes, numbered on.
func checkUpgradedFeed(t *testing.T, url, token string, schema int) {
	t.Helper()
	status, body := upgradeRequest(t, "GET", url+"/events?limit=1000", token, "")
	var events []feedEvent
	if status != 200 || json.Unmarshal([]byte(body), &events) != nil {
		t.Fatalf("GET /events: %d %s", status, body)
	}
	var got []string
	for i, e := range events {
		if e.ID != int64(i+1) {
			t.Errorf("event %d has id %d, want %d: ids from 1 without a gap", i, e.ID, i+1)
		}
		got = append(got, fmt.Sprintf("%s %d", e.Type, e.Plant.ID))
	}
	var want []string
	if schema >= 4 {
		for _, id := range []int64{1, 2, 3, 4, 5, -7, 9223372036854775807, -9223372036854775808} {
			want = append(want, fmt.Sprintf("plant.created %d", id))
		}
		want = append(want, "plant.updated 2", "plant.updated 4", "plant.deleted 5")
	}
	want = append(want, "plant.created 77", "plant.updated 1", "plant.deleted -7")
	if !slices.Equal(got, want) {
		t.Errorf("GET /events after the upgrade:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func plantsText(ps []upgradePlant) []string {
	var out []string
	for _, p := range ps {
		tag := "no tag"
		if p.Tag != nil {
			tag = fmt.Sprintf("tag %q", *p.Tag)
		}
		out = append(out, fmt.Sprintf("%d %q %s", p.ID, p.Name, tag))
	}
	return out
}

func upgradeRequest(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := apitest.Client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// The rollback docs/upgrades.md gives for SQLite: this version's backup
// of an earlier store keeps the earlier schema (backup never migrates),
// and restoring it after the upgrade gives that store back, which the
// earlier binary accepts.
func TestRollbackByRestoringTheBackup(t *testing.T) {
	fixtures, err := filepath.Glob(filepath.Join(upgradeFixtures, "v*.db"))
	if err != nil || len(fixtures) == 0 {
		t.Fatalf("no fixtures in %s: %v", upgradeFixtures, err)
	}
	for _, fixture := range fixtures {
		version := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(fixture), "v"), ".db")
		t.Run("v"+version, func(t *testing.T) {
			t.Parallel()
			store, err := os.ReadFile(fixture)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "plantstore.db"), store, 0o600); err != nil {
				t.Fatal(err)
			}
			earlier := "schema version " + version + ","
			if r := cli(t, dir, nil, "backup", "--to", "before-upgrade.db"); r.exit != 0 || !strings.Contains(r.stderr, earlier) {
				t.Fatalf("backup before the upgrade: exit %d, %s; want %q", r.exit, r.stderr, earlier)
			}
			// Every command of this version migrates the store it opens,
			// as serve does.
			if r := cli(t, dir, nil, "token", "list"); r.exit != 0 {
				t.Fatalf("token list: exit %d, %s", r.exit, r.stderr)
			}
			if r := cli(t, dir, nil, "backup", "--to", "after-upgrade.db"); r.exit != 0 || strings.Contains(r.stderr, earlier) {
				t.Fatalf("backup after the upgrade: exit %d, %s; want the current schema version", r.exit, r.stderr)
			}
			if r := cli(t, dir, nil, "restore", "--from", "before-upgrade.db", "--force"); r.exit != 0 || !strings.Contains(r.stderr, earlier) {
				t.Fatalf("restore: exit %d, %s; want %q", r.exit, r.stderr, earlier)
			}
		})
	}
}
