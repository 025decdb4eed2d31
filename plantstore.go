// Package plantstore holds the domain of the Plant Store service: plants,
// access tokens, the interfaces a storage engine implements, and the error
// kinds every layer speaks. It imports only the standard library; the HTTP
// transport and the storage engines depend on it, never the other way round.
package plantstore

import (
	"context"
	"fmt"
	"math"
	"unicode"
	"unicode/utf8"
)

// Limits on plant fields, counted in Unicode code points as JSON Schema's
// minLength and maxLength count them, and on list pages.
const (
	MaxNameLength    = 200
	MaxTagLength     = 100
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// Plant is a plant record. Its ID is chosen by the client that creates it.
type Plant struct {
	ID   int64
	Name string
	// Tag is nil when the plant has no tag; a pointer to "" is an empty tag,
	// which is a different plant content from no tag at all.
	Tag *string
}

// SameContent reports whether p and q carry the same id, name and tag, which
// is what makes a repeated create an idempotent replay rather than a conflict.
func (p Plant) SameContent(q Plant) bool {
	if p.ID != q.ID || p.Name != q.Name || (p.Tag == nil) != (q.Tag == nil) {
		return false
	}
	return p.Tag == nil || *p.Tag == *q.Tag
}

// Validate checks the length and character rules of name and tag and
// returns an EINVALID error that names the offending field.
func (p Plant) Validate() error {
	if err := validateText("name", p.Name, 1, MaxNameLength); err != nil {
		return err
	}
	if p.Tag != nil {
		if err := validateText("tag", *p.Tag, 0, MaxTagLength); err != nil {
			return err
		}
	}
	return nil
}

// ValidateTag checks a tag on its own, as a list filter is checked.
func ValidateTag(tag string) error { return validateText("tag", tag, 0, MaxTagLength) }

func validateText(field, s string, minLen, maxLen int) error {
	if !utf8.ValidString(s) {
		return Errorf(EINVALID, "%s: must be valid UTF-8", field)
	}
	n := 0
	for _, r := range s {
		if unicode.IsControl(r) {
			return Errorf(EINVALID, "%s: must not contain control characters (found U+%04X)", field, r)
		}
		n++
	}
	if n < minLen || n > maxLen {
		return Errorf(EINVALID, "%s: must be %d to %d characters long, got %d", field, minLen, maxLen, n)
	}
	return nil
}

// PlantStore keeps plants durably: a nil error from a method that writes
// means the change is on stable storage.
type PlantStore interface {
	// CreatePlant stores p, which the caller has validated. When a plant with
	// p.ID already exists with the same content, it changes nothing and
	// returns created=false (an idempotent replay). When it exists with other
	// content it returns ECONFLICT and changes nothing. Of concurrent creates
	// of one id, exactly one content is stored. Store faults are EUNAVAILABLE
	// or EINTERNAL.
	CreatePlant(ctx context.Context, p Plant) (created bool, err error)
	// GetPlant returns the plant stored under id, or ENOTFOUND.
	GetPlant(ctx context.Context, id int64) (Plant, error)
	// ListPlants returns up to opts.Limit plants in ascending id order:
	// those with an id greater than *opts.After when it is set, and a tag
	// equal to *opts.Tag when it is set. It costs the same wherever the page
	// starts (keyset paging). A Limit below 1 is EINVALID.
	ListPlants(ctx context.Context, opts ListOptions) ([]Plant, error)
	// UpdatePlant replaces the name and tag of the plant with p.ID, which
	// the caller has validated, or returns ENOTFOUND. With a precondition,
	// it changes the plant only if the precondition holds for the stored
	// plant, judged in the transaction that changes it; otherwise it
	// returns EPRECONDITION and changes nothing.
	UpdatePlant(ctx context.Context, p Plant, cond Precondition) error
	// DeletePlant removes the plant with id, or returns ENOTFOUND; with a
	// precondition, as UpdatePlant. The id can then be created again.
	DeletePlant(ctx context.Context, id int64, cond Precondition) error
}

// Precondition is a condition a write puts on the plant it changes (the
// HTTP transport's If-Match): it holds for the stored plant or not. A nil
// Precondition always holds.
type Precondition func(stored Plant) bool

// ListOptions select a page of plants.
type ListOptions struct {
	After *int64  // only ids greater than this
	Tag   *string // only plants with exactly this tag
	Limit int     // at most this many; 1 or more (a caller may ask one more than a page, to see whether another follows)
}

// Validate reports a Limit below 1, or a Tag no plant could have, as
// EINVALID: a store is never asked for what its database may refuse.
func (o ListOptions) Validate() error {
	if o.Limit < 1 {
		return Errorf(EINVALID, "list limit %d: must be 1 or more", o.Limit)
	}
	if o.Tag != nil {
		return ValidateTag(*o.Tag)
	}
	return nil
}

// FirstID is the lowest id the page may hold, for an engine's keyset query
// "id >= first": After+1, or the least int64 when After is not set. ok is
// false when After is the greatest int64, so no id follows it and the page
// is empty.
func (o ListOptions) FirstID() (first int64, ok bool) {
	if o.After == nil {
		return math.MinInt64, true
	}
	if *o.After == math.MaxInt64 {
		return 0, false
	}
	return *o.After + 1, true
}

// Store is everything a storage engine provides.
type Store interface {
	PlantStore
	TokenStore
	WebhookStore
	EventStore
	// Ping reports whether the store answers; it returns EUNAVAILABLE when not.
	Ping(ctx context.Context) error
	Close() error
}

// String is for logs: it never includes anything secret.
func (p Plant) String() string {
	if p.Tag == nil {
		return fmt.Sprintf("plant %d %q", p.ID, p.Name)
	}
	return fmt.Sprintf("plant %d %q tag %q", p.ID, p.Name, *p.Tag)
}
