package httpapi

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/plantstore/plantstore"
)

// plantBody is the contract's Plant: the answer to a create carries no id.
type plantBody struct {
	Name string  `json:"name"`
	Tag  *string `json:"tag,omitzero"`
}

// storedPlantBody is a Plant with its id, as read, listed and updated.
type storedPlantBody struct {
	ID   int64   `json:"id"`
	Name string  `json:"name"`
	Tag  *string `json:"tag,omitzero"`
}

func storedPlant(p plantstore.Plant) storedPlantBody {
	return storedPlantBody{ID: p.ID, Name: p.Name, Tag: p.Tag}
}

func (s *Server) handleCreatePlant() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := bodyBuffers.Get().(*[]byte)
		body, err := s.readJSONBody(w, r, *buf)
		if err != nil {
			putBuffer(buf, *buf)
			s.writeError(w, r, err)
			return
		}
		p, err := decodeNewPlant(body)
		putBuffer(buf, body) // the plant's strings are copies
		if err == nil {
			err = p.Validate()
		}
		if err == nil {
			_, err = s.store.CreatePlant(s.storeContext(r), p)
		}
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, plantBody{Name: p.Name, Tag: p.Tag})
	})
}

func (s *Server) handleGetPlant() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := pathID(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		p, err := s.store.GetPlant(r.Context(), id)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		s.writeRead(w, r, storedPlant(p), func([]byte) string { return plantETag(p) })
	})
}

// handleUpdatePlant replaces a plant's name and tag. The body is a Plant;
// an id in it must be the path's. It never creates: that is POST's job,
// with the client's id.
func (s *Server) handleUpdatePlant() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := pathID(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		buf := bodyBuffers.Get().(*[]byte)
		body, err := s.readJSONBody(w, r, *buf)
		if err != nil {
			putBuffer(buf, *buf)
			s.writeError(w, r, err)
			return
		}
		p, hasID, err := decodePlant(body, "Plant", false)
		putBuffer(buf, body)
		if err == nil && hasID && p.ID != id {
			err = invalid("id: %d in the body differs from %d in the path", p.ID, id)
		}
		p.ID = id
		if err == nil {
			err = p.Validate()
		}
		cond := writeConditionOf(r)
		if err == nil {
			err = s.store.UpdatePlant(s.storeContext(r), p, cond.check)
		}
		if err != nil {
			s.writeError(w, r, cond.failed(err, id))
			return
		}
		// The new ETag, so the client can make its next change conditional
		// without reading the plant again.
		writeJSONTagged(w, nil, http.StatusOK, storedPlant(p), func([]byte) string { return plantETag(p) }, false)
	})
}

func (s *Server) handleDeletePlant() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := pathID(r)
		cond := writeConditionOf(r)
		if err == nil {
			err = s.store.DeletePlant(r.Context(), id, cond.check)
		}
		if err != nil {
			s.writeError(w, r, cond.failed(err, id))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// handleListPlants answers one page of plants in id order. When the page
// is full it links the next one (RFC 8288), keeping limit and tag, so that
// following "next" visits every plant once.
func (s *Server) handleListPlants() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		opts, err := listOptions(r.URL.RawQuery)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		// One more than asked tells whether another page follows.
		want := opts.Limit
		opts.Limit++
		plants, err := s.store.ListPlants(r.Context(), opts)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		linksNext := len(plants) > want
		if linksNext {
			plants = plants[:want]
			next := nextPage(plants[want-1].ID, want, opts.Tag)
			if base := s.baseURL(r); base != "" {
				next = base + "/plants" + next
			}
			w.Header().Set("Link", fmt.Sprintf(`<%s>; rel="next"`, next))
		}
		s.writeRead(w, r, plantPage(plants), pageETag(linksNext))
	})
}

// listOptions reads limit, after and tag from a query, strictly: a
// parameter given twice, or a value out of range, is a 400; others are
// ignored.
func listOptions(rawQuery string) (plantstore.ListOptions, error) {
	opts := plantstore.ListOptions{Limit: plantstore.DefaultListLimit}
	q, err := parseQuery(rawQuery)
	if err != nil {
		return opts, invalid("the query string is malformed: %v", err)
	}
	for _, name := range []string{"limit", "after", "tag"} {
		if len(q[name]) > 1 {
			return opts, invalid("%s: give it at most once", name)
		}
	}
	if v, ok := q["limit"]; ok {
		n, err := queryLimit(v[0], plantstore.MaxListLimit)
		if err != nil {
			return opts, err
		}
		opts.Limit = n
	}
	if v, ok := q["after"]; ok {
		after, err := parseID(v[0])
		if err != nil {
			return opts, invalid("after: %s%s", err, spaceHint(v[0]))
		}
		opts.After = &after
	}
	if v, ok := q["tag"]; ok {
		if err := plantstore.ValidateTag(v[0]); err != nil {
			return opts, err
		}
		opts.Tag = &v[0]
	}
	return opts, nil
}

// nextPage is the query of the page after lastID ("?after=...&limit=..."),
// which the caller makes absolute (see baseURL): most clients follow a
// link without resolving it against the URL they asked, though RFC 8288
// says they should, so a relative one would break them. Only a request
// without a usable Host gets it relative.
func nextPage(lastID int64, limit int, tag *string) string {
	q := url.Values{"after": {strconv.FormatInt(lastID, 10)}, "limit": {strconv.Itoa(limit)}}
	if tag != nil {
		q.Set("tag", *tag)
	}
	return "?" + q.Encode()
}

// queryLimit reads a query's limit, a plain integer from 1 to max.
func queryLimit(v string, max int) (int, error) {
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || !plainInteger(v) || n < 1 || n > int64(max) {
		return 0, invalid("limit: must be an integer from 1 to %d, got %q%s", max, truncate(v, 40), spaceHint(v))
	}
	return int(n), nil
}

// spaceHint explains a space in a number in a query, which a client most
// likely sent as a "+" (the query's space) meaning a sign. A number takes
// no sign at all, so the hint is to leave it out, not to send it as %2B.
func spaceHint(v string) string {
	if !strings.Contains(v, " ") {
		return ""
	}
	return ` (a "+" in a query string is a space; send the number without a sign or spaces)`
}

// plainInteger reports whether s is an optional minus and decimal digits,
// which strconv.ParseInt accepts and more ("+1", "0x1f" with base 0, "1_000").
func plainInteger(s string) bool {
	s = strings.TrimPrefix(s, "-")
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// parseID reads an id written as a plain decimal integer.
func parseID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || !plainInteger(s) {
		return 0, fmt.Errorf("must be an integer from %d to %d, got %q", int64(-1<<63), int64(1<<63-1), truncate(s, 40))
	}
	return id, nil
}

func pathID(r *http.Request) (int64, error) {
	id, err := parseID(r.PathValue("id"))
	if err != nil {
		return 0, invalid("id in the path: %s", err)
	}
	return id, nil
}
