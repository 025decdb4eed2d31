package plantstore_test

import (
	"math"
	"regexp"
	"strings"
	"testing"

	"github.com/plantstore/plantstore"
)

func TestNewTokenShape(t *testing.T) {
	shape := regexp.MustCompile(`^pst_[0-9A-Za-z]{38}$`)
	seen := map[string]bool{}
	for range 1000 {
		tok := plantstore.NewToken()
		if !shape.MatchString(tok) || !plantstore.WellFormedToken(tok) {
			t.Fatalf("token %q is not well formed", tok)
		}
		if seen[tok] {
			t.Fatalf("token %q issued twice", tok)
		}
		seen[tok] = true
	}
	tok := plantstore.NewToken()
	for i := len(plantstore.TokenPrefix); i < len(tok); i++ {
		b := []byte(tok)
		if b[i] == 'a' {
			b[i] = 'b'
		} else {
			b[i] = 'a'
		}
		if plantstore.WellFormedToken(string(b)) {
			t.Errorf("changing character %d of %q keeps it well formed", i, tok)
		}
	}
	for _, c := range []byte{'_', '-', '/', '+', ' ', 0, 0xff, '0' - 1, '9' + 1, 'A' - 1, 'Z' + 1, 'a' - 1, 'z' + 1} {
		b := []byte(tok)
		b[len(plantstore.TokenPrefix)+3] = c
		if plantstore.WellFormedToken(string(b)) {
			t.Errorf("%q, outside the alphabet, is well formed", b)
		}
	}
	for _, s := range []string{"", tok[:len(tok)-1], tok + "0", "PST_" + tok[4:], strings.Repeat("x", len(tok))} {
		if plantstore.WellFormedToken(s) {
			t.Errorf("%q is well formed", s)
		}
	}
}

func TestValidate(t *testing.T) {
	tag := func(s string) *string { return &s }
	good := []plantstore.Plant{
		{Name: "a"}, {Name: strings.Repeat("é", 200), Tag: tag(strings.Repeat("x", 100))}, {Name: "a", Tag: tag("")},
		{Name: "tab-free \u2028 line separator is not a control"},
	}
	for _, p := range good {
		if err := p.Validate(); err != nil {
			t.Errorf("%v: %v", p, err)
		}
	}
	bad := []plantstore.Plant{
		{Name: ""}, {Name: strings.Repeat("é", 201)}, {Name: "a\tb"}, {Name: "a\x00"}, {Name: "\x7f"},
		{Name: "a", Tag: tag(strings.Repeat("x", 101))}, {Name: "a", Tag: tag("\u0085")}, {Name: "bad \xff utf8"},
	}
	for _, p := range bad {
		if err := p.Validate(); plantstore.ErrorCode(err) != plantstore.EINVALID {
			t.Errorf("%v: %v, want %s", p, err, plantstore.EINVALID)
		}
	}
}

func TestParseScopes(t *testing.T) {
	got, err := plantstore.ParseScopes(" plants:write , plants:read,plants:write")
	if err != nil || strings.Join(got, " ") != "plants:read plants:write" {
		t.Errorf("ParseScopes = %v, %v", got, err)
	}
	for _, bad := range []string{"", ",", "plants:admin", "plants:read,root"} {
		if _, err := plantstore.ParseScopes(bad); err == nil {
			t.Errorf("ParseScopes(%q) accepted", bad)
		}
	}
}

func TestErrorCodes(t *testing.T) {
	err := plantstore.WrapError(plantstore.EUNAVAILABLE, "try later", errSecret{})
	if plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE || plantstore.ErrorMessage(err) != "try later" {
		t.Errorf("code %q message %q", plantstore.ErrorCode(err), plantstore.ErrorMessage(err))
	}
	if plantstore.ErrorCode(errSecret{}) != plantstore.EINTERNAL || plantstore.ErrorMessage(errSecret{}) != "internal error" {
		t.Error("an unknown error must be internal, its text hidden")
	}
}

type errSecret struct{}

func (errSecret) Error() string { return "password=hunter2" }

func TestListOptionsFirstID(t *testing.T) {
	at := func(n int64) *int64 { return &n }
	for _, tc := range []struct {
		after *int64
		first int64
		ok    bool
	}{
		{nil, math.MinInt64, true},
		{at(-1), 0, true},
		{at(41), 42, true},
		{at(math.MaxInt64 - 1), math.MaxInt64, true},
		{at(math.MaxInt64), 0, false},
	} {
		first, ok := plantstore.ListOptions{After: tc.after, Limit: 1}.FirstID()
		if first != tc.first || ok != tc.ok {
			t.Errorf("FirstID after %v = %d, %v; want %d, %v", tc.after, first, ok, tc.first, tc.ok)
		}
	}
	if err := (plantstore.ListOptions{Limit: 0}).Validate(); plantstore.ErrorCode(err) != plantstore.EINVALID {
		t.Errorf("Validate with limit 0: %v, want EINVALID", err)
	}
}

// Every request checks its token's shape: the check allocates nothing.
func TestWellFormedTokenAllocatesNothing(t *testing.T) {
	tok := plantstore.NewToken()
	if n := testing.AllocsPerRun(100, func() { plantstore.WellFormedToken(tok) }); n != 0 {
		t.Fatalf("WellFormedToken allocates %v times a call", n)
	}
}
