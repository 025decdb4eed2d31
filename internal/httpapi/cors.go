package httpapi

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// Cross-origin requests (CORS), off unless Config.CORSOrigins names the
// origins whose web pages may call the API. Tokens travel in the
// Authorization header, never in cookies, so no origin is ever allowed
// credentials: "*" is then safe to allow any origin.

// apiMethods are the methods the API's routes answer (routes in
// server.go): what OPTIONS * lists in Allow. OPTIONS itself is not among
// them: a route answers it 405, unless it is a CORS preflight.
const apiMethods = "GET, HEAD, POST, PUT, DELETE"

// corsMethods and corsHeaders are what a page may send; corsExposed, what
// it may read of an answer besides the simple headers.
const (
	corsMethods = apiMethods
	corsHeaders = "Authorization, Content-Type, If-Match, If-None-Match, Last-Event-ID, X-Request-Id"
	corsExposed = "ETag, Latest-Event-Id, Link, Retry-After, X-Request-Id"
	// corsMaxAge is how long a browser may keep a preflight's answer, in
	// seconds: ten minutes, under every browser's own cap.
	corsMaxAge = "600"
)

// ParseCORSOrigins checks the origins of --cors-origins: "*", or origins
// (scheme, host and port, nothing else), and returns them as browsers
// send them.
func ParseCORSOrigins(list string) ([]string, error) {
	var origins []string
	for o := range strings.SplitSeq(list, ",") {
		o = strings.TrimSpace(o)
		if o == "" {
			continue
		}
		if o == "*" {
			origins = append(origins, o)
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			return nil, fmt.Errorf("%q is not an origin: scheme://host[:port], nothing after", o)
		}
		origins = append(origins, strings.ToLower(u.Scheme+"://"+u.Host))
	}
	if slices.Contains(origins, "*") && len(origins) > 1 {
		return nil, fmt.Errorf("%q: * allows every origin; list no others beside it", list)
	}
	return origins, nil
}

// corsOrigin is the Access-Control-Allow-Origin for a request from
// origin: "*" when any origin may call, the origin itself when it is
// listed, "" when it may not.
func (s *Server) corsOrigin(origin string) string {
	if origin == "" || len(s.cfg.CORSOrigins) == 0 {
		return ""
	}
	if s.cfg.CORSOrigins[0] == "*" {
		return "*"
	}
	if slices.Contains(s.cfg.CORSOrigins, strings.ToLower(origin)) {
		return origin
	}
	return ""
}

// cors marks answers to allowed origins as readable by their pages, and
// says whether r is such a page's preflight, for answerPreflight. It runs
// before the refusals made before routing (oversized headers, a bad
// Host), so that a page can read those answers too. Other origins get no
// CORS header, and their browsers keep the answers from their pages.
func (s *Server) cors(w http.ResponseWriter, r *http.Request) (preflight bool) {
	if len(s.cfg.CORSOrigins) == 0 {
		return false
	}
	h := w.Header()
	if s.cfg.CORSOrigins[0] != "*" {
		h.Add("Vary", "Origin") // the answer depends on who asks
	}
	allowed := s.corsOrigin(r.Header.Get("Origin"))
	if allowed == "" {
		return false
	}
	h.Set("Access-Control-Allow-Origin", allowed)
	if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
		return true
	}
	h.Set("Access-Control-Expose-Headers", corsExposed)
	return false
}

// answerPreflight answers a preflight from an allowed origin.
func answerPreflight(w http.ResponseWriter) {
	h := w.Header()
	h.Add("Vary", "Access-Control-Request-Method")
	h.Add("Vary", "Access-Control-Request-Headers")
	h.Set("Access-Control-Allow-Methods", corsMethods)
	h.Set("Access-Control-Allow-Headers", corsHeaders)
	h.Set("Access-Control-Max-Age", corsMaxAge)
	w.WriteHeader(http.StatusNoContent)
}
