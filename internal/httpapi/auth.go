package httpapi

import (
	"net/http"
	"strings"

	"github.com/plantstore/plantstore"
)

// requireScope lets a request through to next only with a valid bearer
// token (RFC 6750) that grants scope, within the token's rate limit, and,
// from an address that has failed authentication too often, only with a
// token this process has found valid before (see reserveLookup).
func (s *Server) requireScope(scope string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if mayHoldToken(r.URL.RawQuery) && len(r.Header.Values("Authorization")) > 0 {
			if q, err := parseQuery(r.URL.RawQuery); err == nil && sentToken(q["access_token"]) {
				// A token both ways (one a stream's queryToken did not
				// take): one method only, RFC 6750 section 2.
				s.writeError(w, r, bothWays)
				return
			}
		}
		secret, err := bearerToken(r.Header)
		if err != nil && len(r.Header.Values("Authorization")) == 0 && strings.Contains(r.URL.RawQuery, "access_token=") {
			// queryToken took it for no stream: say why, not only that
			// a token is missing.
			err = credentialError(http.StatusUnauthorized, "", "an access token is required: send Authorization: Bearer <token> (the access_token query parameter is taken only by an event stream, a GET /events that accepts text/event-stream)", "")
		}
		if err != nil {
			if s.countsAsGuess(err) {
				s.noteAuthFailure(r, s.clientAddr(r))
			}
			s.writeError(w, r, err)
			return
		}
		hash := s.auth.Hash(secret)
		token, ok := s.auth.Cached(hash)
		if !ok {
			// A lookup in the store: what a guess costs, and what the
			// failed-authentication throttle guards.
			slot, refused := s.reserveLookup(w, r, hash)
			if refused {
				return
			}
			token, err = s.auth.Lookup(r.Context(), hash)
			if plantstore.ErrorCode(err) == plantstore.EUNAUTHORIZED {
				err = invalidToken(plantstore.ErrorMessage(err))
			}
			s.settleLookup(r, slot, err)
			if err != nil {
				s.writeError(w, r, err)
				return
			}
		}
		info := infoFrom(r.Context())
		info.token, info.tokenID = token.Name, token.ID
		if s.tokenRateExceeded(w, r, token.ID) {
			return
		}
		if !token.HasScope(scope) {
			s.writeError(w, r, credentialError(http.StatusForbidden, "insufficient_scope", "the access token lacks the scope "+scope, scope))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// bearerToken extracts the token of an "Authorization: Bearer <token>"
// header. The scheme is case-insensitive (RFC 9110 section 11.1).
func bearerToken(h http.Header) (string, error) {
	values := h.Values("Authorization")
	if len(values) == 0 {
		return "", credentialError(http.StatusUnauthorized, "", "an access token is required: send Authorization: Bearer <token>", "")
	}
	if len(values) > 1 {
		return "", invalidToken("send exactly one Authorization header")
	}
	scheme, rest, _ := strings.Cut(strings.TrimLeft(values[0], " "), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		if len(scheme) > len("Bearer") && strings.EqualFold(scheme[:len("Bearer")], "Bearer") && scheme[len("Bearer")] == '\t' {
			// RFC 9110's credentials take a space there (section 11.4).
			return "", invalidToken("separate Bearer from the token with a space, not a tab")
		}
		return "", credentialError(http.StatusUnauthorized, "", "the Authorization scheme must be Bearer", "")
	}
	token := strings.Trim(rest, " ")
	if token == "" {
		return "", invalidToken("the access token is empty")
	}
	return token, nil
}

func invalidToken(description string) error {
	return credentialError(http.StatusUnauthorized, "invalid_token", description, "")
}
