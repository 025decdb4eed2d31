// Package plantstore holds the domain of the Plant Store service: plants,
// access tokens, the interfaces a storage engine implements, and the error
// kinds every layer speaks. It imports only the standard library; the HTTP
// transport and the storage engines depend on it, never the other way round.
package plantstore

import (
	"context"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// Limits on plant fields, counted in Unicode code points as JSON Schema's
// minLength and maxLength count them.
const (
	MaxNameLength = 200
	MaxTagLength  = 100
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
}

// Store is everything a storage engine provides.
type Store interface {
	PlantStore
	TokenStore
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
