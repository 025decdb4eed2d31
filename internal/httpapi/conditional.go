package httpapi

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"net/http"
	"slices"
	"strings"

	"github.com/plantstore/plantstore"
)

// Conditional requests (RFC 9110 section 13). A plant's ETag is strong
// and made from its content, a hash of its id, name and tag: it changes
// whenever the plant does, is the same on every instance and engine, and
// needs nothing stored beside the plant; its gzipped answer's tag ends in
// "-gz" (gzipETag). A page's ETag is weak, a hash of the page's body.
//
// GET answers 304 when If-None-Match names the current ETag. PUT and
// DELETE with If-Match change the plant only if it still has one of the
// named ETags ("*": if it exists), and with If-None-Match only if it has
// none of them ("*": never, as they do not create), judged in the
// transaction that writes; otherwise 412 and nothing changes.

// plantETag is the strong ETag of p's representation.
func plantETag(p plantstore.Plant) string {
	// The hashed input is built on the stack: a read pays for the tag
	// string alone.
	var scratch [256]byte
	b := binary.BigEndian.AppendUint64(scratch[:0], uint64(p.ID))
	b = appendField(b, p.Name)
	if p.Tag != nil {
		b = appendField(append(b, 1), *p.Tag)
	} else {
		b = append(b, 0)
	}
	sum := sha256.Sum256(b)
	return quoteTag(sum[:])
}

// gzipETag is the ETag of the gzipped answer whose identity answer has
// the strong tag: a strong validator names one sequence of bytes, so the
// two codings need two tags (RFC 9110 section 8.8.3). Either names the
// plant's state in If-Match and If-None-Match. A weak tag is the same for
// both.
func gzipETag(tag string) string {
	if strings.HasPrefix(tag, "W/") {
		return tag
	}
	return strings.TrimSuffix(tag, `"`) + `-gz"`
}

// appendField appends s length first, so no two plants hash the same
// input.
func appendField(b []byte, s string) []byte {
	return append(binary.BigEndian.AppendUint64(b, uint64(len(s))), s...)
}

// pageETag is the weak ETag of a page: of its body, and of whether it
// links a next page. A 304 leaves the Link a client's cache holds in place
// (RFC 9111, section 4.3.4), so a page whose body stayed the same while
// its next page went away (its plants deleted) must not revalidate a copy
// that still links it.
func pageETag(linksNext bool) func(body []byte) string {
	return func(body []byte) string {
		sum := sha256.Sum256(body)
		if linksNext {
			sum[0] ^= 1
		}
		return "W/" + quoteTag(sum[:])
	}
}

// quoteTag makes an opaque tag of a hash: 128 bits, base64url.
func quoteTag(sum []byte) string {
	var out [2 + 22]byte // 16 bytes in unpadded base64, quoted
	out[0], out[len(out)-1] = '"', '"'
	base64.RawURLEncoding.Encode(out[1:len(out)-1], sum[:16])
	return string(out[:])
}

// etagList reads the entity-tags of an If-Match or If-None-Match header
// (a comma-separated list of them, or "*" alone); present is whether the
// header was sent at all, and malformed whether it was not such a field
// (RFC 9110, sections 13.1.1 and 13.1.2): a member that is no quoted tag,
// or a "*" among tags. A malformed field never lets a write through and
// never gives a 304 (writeConditionOf, readPrecondition, notModified):
// the client meant a condition the service cannot read.
func etagList(h http.Header, name string) (tags []string, any, present, malformed bool) {
	values := h.Values(name)
	if len(values) == 0 {
		return nil, false, false, false
	}
	members := 0
	for _, v := range values {
		for tag := range strings.SplitSeq(v, ",") {
			tag = strings.TrimSpace(tag)
			switch {
			case tag == "":
				continue // empty list elements are allowed (RFC 9110, section 5.6.1)
			case tag == "*":
				any = true
			case entityTag(tag):
				tags = append(tags, tag)
			default:
				malformed = true
			}
			members++
		}
	}
	if any && members > 1 {
		malformed = true
	}
	return tags, any, true, malformed
}

// entityTag tells whether tag is an entity-tag: optionally W/, then a
// quoted string of visible characters other than '"' (RFC 9110, section
// 8.8.3).
func entityTag(tag string) bool {
	tag = strings.TrimPrefix(tag, "W/")
	if len(tag) < 2 || tag[0] != '"' || tag[len(tag)-1] != '"' {
		return false
	}
	for i := 1; i < len(tag)-1; i++ {
		if c := tag[i]; c < 0x21 || c == '"' || c == 0x7f {
			return false
		}
	}
	return true
}

// strongMatch is If-Match's comparison: equal tags, neither weak.
func strongMatch(tags []string, current string) bool {
	for _, t := range tags {
		if !strings.HasPrefix(t, "W/") && t == current {
			return true
		}
	}
	return false
}

// weakMatch is If-None-Match's comparison: equal opaque tags, weak or not.
func weakMatch(tags []string, current string) bool {
	current = strings.TrimPrefix(current, "W/")
	for _, t := range tags {
		if strings.TrimPrefix(t, "W/") == current {
			return true
		}
	}
	return false
}

// writeCondition is a write's precondition from If-Match and
// If-None-Match (RFC 9110 section 13.2.2, in that order); its check is nil
// when neither was sent. If-Match holds when the plant has one of the named ETags
// (strong comparison; "*": the plant exists); If-None-Match holds when it
// has none of them (weak comparison; "*": it does not exist). Either
// coding's tag names the plant's state. A malformed field holds for no
// plant. A missing plant is 404 whatever the preconditions: they are
// ignored when the write without them would not succeed (RFC 9110,
// section 13.2.1).
type writeCondition struct {
	check plantstore.Precondition
	// noneMatched is set when If-None-Match is what failed; the writer
	// sets it before the caller is answered.
	noneMatched *bool
	// malformed names the header that is no list of ETags, if one is not.
	malformed string
}

func writeConditionOf(r *http.Request) writeCondition {
	matchTags, matchAny, hasMatch, badMatch := etagList(r.Header, "If-Match")
	noneTags, noneAny, hasNone, badNone := etagList(r.Header, "If-None-Match")
	if !hasMatch && !hasNone {
		return writeCondition{}
	}
	noneMatched := new(bool)
	malformed := ""
	if badNone {
		malformed = "If-None-Match"
	}
	if badMatch {
		malformed = "If-Match"
	}
	return writeCondition{noneMatched: noneMatched, malformed: malformed, check: func(stored plantstore.Plant) bool {
		tag := plantETag(stored)
		gz := gzipETag(tag)
		if hasMatch && (badMatch || !(matchAny || strongMatch(matchTags, tag) || strongMatch(matchTags, gz))) {
			return false
		}
		if hasNone && (badNone || noneAny || weakMatch(noneTags, tag) || weakMatch(noneTags, gz)) {
			*noneMatched = true
			return false
		}
		return true
	}}
}

// failed is the error of a write under c: 412 when c did not hold.
func (c writeCondition) failed(err error, id int64) error {
	if plantstore.ErrorCode(err) != plantstore.EPRECONDITION {
		return err
	}
	switch {
	case c.malformed != "":
		return errorStatus(http.StatusPreconditionFailed, malformedCondition+", so nothing was changed", c.malformed)
	case c.noneMatched != nil && *c.noneMatched:
		return errorStatus(http.StatusPreconditionFailed,
			"plant %d matches If-None-Match: it has an ETag you named (or exists, for *), so nothing was changed", id)
	}
	return preconditionFailed(id)
}

// readConditions evaluates a read's preconditions against tag, the
// resource's current ETag, whose gzipped answer's tag (gzipETag) names the
// same state: If-Match first, then If-None-Match (RFC 9110, section
// 13.2.2). It returns the 412 to answer, or whether the answer is a 304.
func readConditions(r *http.Request, tag string) (unchanged bool, err error) {
	gzTag := gzipETag(tag)
	if err := readPrecondition(r, tag, gzTag); err != nil {
		return false, err
	}
	return notModified(r, tag, gzTag), nil
}

// notModified reports whether If-None-Match names one of current (the
// tags of one state of the resource), so a GET answers 304.
func notModified(r *http.Request, current ...string) bool {
	tags, any, present, malformed := etagList(r.Header, "If-None-Match")
	if !present || malformed {
		return false
	}
	return any || slices.ContainsFunc(current, func(c string) bool { return weakMatch(tags, c) })
}

// readPrecondition is the 412 of a read whose If-Match does not hold (RFC
// 9110, section 13.1.1: evaluated for any method that selects a
// representation, a GET too): sent, and neither "*" nor a strong match of
// a current tag, or malformed; nil when it holds or was not sent. A
// page's weak tag never matches strongly.
func readPrecondition(r *http.Request, current ...string) error {
	tags, any, present, malformed := etagList(r.Header, "If-Match")
	switch {
	case !present:
		return nil
	case malformed:
		return errorStatus(http.StatusPreconditionFailed, malformedCondition, "If-Match")
	case any || slices.ContainsFunc(current, func(c string) bool { return strongMatch(tags, c) }):
		return nil
	}
	return errStaleIfMatch
}

// malformedCondition is the message of a 412 for a precondition header
// the service cannot read.
const malformedCondition = `%s is not "*" alone or a list of quoted ETags ("…" or W/"…")`

// errStaleIfMatch is the answer to a read whose If-Match names no current
// state of what it reads (RFC 9110, section 13.1.1).
var errStaleIfMatch = errorStatus(http.StatusPreconditionFailed,
	"If-Match names no current state of this resource: GET it without If-Match for its current ETag")

// writeRead answers a read (a plant, a page of plants or events) with v
// under its ETag, 304 or 412 as r's preconditions say. Headers set for
// the 200 (a page's Link, the feed's Latest-Event-Id) do not go with a 412.
func (s *Server) writeRead(w http.ResponseWriter, r *http.Request, v any, etag func(body []byte) string) {
	if err := writeJSONTagged(w, r, http.StatusOK, v, etag, true); err != nil {
		w.Header().Del("Link")
		w.Header().Del(latestEventHeader)
		s.writeError(w, r, err)
	}
}

// preconditionFailed is the answer to a write whose If-Match does not
// hold: the plant has changed since the client read it.
func preconditionFailed(id int64) error {
	return errorStatus(http.StatusPreconditionFailed,
		"plant %d does not match If-Match: it has changed since you read it; GET it for its current ETag", id)
}

// answerNotModified answers 304 with the ETag and no body.
func answerNotModified(w http.ResponseWriter, etag string) {
	h := w.Header()
	h["Etag"] = []string{etag}
	h["Cache-Control"] = revalidate
	w.WriteHeader(http.StatusNotModified)
}

// revalidate lets a client keep what it read and ask again with its ETag
// each time; shared caches do not store answers to requests with a
// token anyway.
var revalidate = []string{"private, no-cache"}
