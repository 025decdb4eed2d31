package plantstore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"hash/crc32"
	"slices"
	"strings"
	"time"
)

// Scopes a token can carry.
const (
	ScopePlantsRead  = "plants:read"
	ScopePlantsWrite = "plants:write"
)

// KnownScopes lists every scope, in the order they are shown.
var KnownScopes = []string{ScopePlantsRead, ScopePlantsWrite}

// Token formats. A token reads "pst_" followed by 32 random base62
// characters (190 bits) and a 6-character base62 CRC-32 of everything before
// it. The prefix lets secret scanners find leaked tokens; the checksum lets
// them, and us, tell a token from a typo without a database lookup.
const (
	TokenPrefix       = "pst_"
	tokenRandomLength = 32
	tokenCheckLength  = 6
	TokenLength       = len(TokenPrefix) + tokenRandomLength + tokenCheckLength
	base62            = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	MaxTokenNameLen   = 100
)

// TokenHash is the SHA-256 of a token: the only form in which a token is
// stored.
type TokenHash [sha256.Size]byte

// HashToken returns the hash under which token is stored.
func HashToken(token string) TokenHash {
	// Every request hashes its token: a token of ours fits a buffer on
	// the stack, where []byte(token), longer than 32 bytes, would be
	// allocated.
	var buf [TokenLength]byte
	if len(token) <= len(buf) {
		n := copy(buf[:], token)
		return sha256.Sum256(buf[:n])
	}
	return sha256.Sum256([]byte(token))
}

// Token is an access token's record. The secret itself is never kept.
type Token struct {
	ID         int64
	Name       string
	Scopes     []string
	CreatedAt  time.Time
	LastUsedAt time.Time // zero when never used
	RevokedAt  time.Time // zero while active
}

// HasScope reports whether t grants scope.
func (t Token) HasScope(scope string) bool { return slices.Contains(t.Scopes, scope) }

// NewToken returns a fresh random token.
func NewToken() string {
	b := make([]byte, 0, TokenLength)
	b = append(b, TokenPrefix...)
	// Rejection sampling keeps every base62 character equally likely.
	var buf [64]byte
	for len(b) < len(TokenPrefix)+tokenRandomLength {
		rand.Read(buf[:])
		for _, c := range buf {
			if c < 248 && len(b) < len(TokenPrefix)+tokenRandomLength {
				b = append(b, base62[c%62])
			}
		}
	}
	return string(appendChecksum(b))
}

func appendChecksum(b []byte) []byte {
	sum := checksum(b)
	var check [tokenCheckLength]byte
	for i := tokenCheckLength - 1; i >= 0; i-- {
		check[i] = base62[sum%62]
		sum /= 62
	}
	return append(b, check[:]...)
}

// checksum is the CRC-32 (IEEE) of a token's body, as crc32.ChecksumIEEE
// computes it, but over a string or bytes in place: every request checks
// a token, and a string's copy handed to crc32 escaped to the heap.
func checksum[T string | []byte](body T) uint32 { return ^crcUpdate(^uint32(0), body) }

func crcUpdate[T string | []byte](sum uint32, body T) uint32 {
	for i := range len(body) {
		sum = crc32.IEEETable[byte(sum)^body[i]] ^ (sum >> 8)
	}
	return sum
}

// WellFormedToken reports whether s has the shape of a token issued by this
// service: prefix, length, alphabet and checksum. It reveals nothing about
// whether the token exists, so it need not run in constant time.
func WellFormedToken(s string) bool {
	return len(s) == TokenLength && strings.HasPrefix(s, TokenPrefix) && IsTokenSecret(s[len(TokenPrefix):])
}

// IsTokenSecret reports whether s is what follows the prefix in a token
// of this service: base62 characters of the length, ending in the
// checksum of the prefix and the rest. A token pasted without its prefix
// is still told by it.
func IsTokenSecret(s string) bool {
	if len(s) != TokenLength-len(TokenPrefix) {
		return false
	}
	for i := range len(s) {
		if c := s[i]; !('0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z') {
			return false
		}
	}
	sum := ^crcUpdate(crcUpdate(^uint32(0), TokenPrefix), s[:len(s)-tokenCheckLength])
	for i := len(s) - 1; i >= len(s)-tokenCheckLength; i-- {
		if s[i] != base62[sum%62] {
			return false
		}
		sum /= 62
	}
	return true
}

// ValidateTokenName checks a token's name: 1 to 100 characters, no control
// characters, and no white space at either end, which would make it look
// like another name in token list ("alice " beside "alice") or blank.
func ValidateTokenName(name string) error {
	if err := validateText("token name", name, 1, MaxTokenNameLen); err != nil {
		return err
	}
	if strings.TrimSpace(name) != name {
		return Errorf(EINVALID, "token name must not begin or end with white space")
	}
	// A name is shown in every access log line and in token list: a
	// secret pasted as one would be too.
	if checks := len(name); HoldsTokenSecret(name, &checks) {
		return Errorf(EINVALID, "token name holds a token's secret, and a name is shown in logs and lists: choose another name (and revoke that token, if it is one)")
	}
	return nil
}

// HoldsTokenSecret says whether s holds a token's secret without its
// prefix (IsTokenSecret), at any position, checking at most *budget
// positions and spending them: each is an alphabet check and a checksum,
// so a caller scanning text of any length bounds its cost.
func HoldsTokenSecret(s string, budget *int) bool {
	n := TokenLength - len(TokenPrefix)
	for k := 0; k+n <= len(s) && *budget > 0; k++ {
		*budget--
		if IsTokenSecret(s[k : k+n]) {
			return true
		}
	}
	return false
}

// ParseScopes splits a comma-separated scope list and checks every entry.
func ParseScopes(list string) ([]string, error) {
	var scopes []string
	for s := range strings.SplitSeq(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !slices.Contains(KnownScopes, s) {
			return nil, Errorf(EINVALID, "unknown scope %q (known: %s)", s, strings.Join(KnownScopes, ", "))
		}
		if !slices.Contains(scopes, s) {
			scopes = append(scopes, s)
		}
	}
	if len(scopes) == 0 {
		return nil, Errorf(EINVALID, "at least one scope is required (known: %s)", strings.Join(KnownScopes, ", "))
	}
	slices.SortFunc(scopes, func(a, b string) int {
		return slices.Index(KnownScopes, a) - slices.Index(KnownScopes, b)
	})
	return scopes, nil
}

// TokenStore keeps token records, looked up by hash.
type TokenStore interface {
	// CreateToken stores t under hash and returns it with its ID set. It
	// returns ECONFLICT when an active token already has t.Name.
	CreateToken(ctx context.Context, t Token, hash TokenHash) (Token, error)
	// TokenByHash returns the active token stored under hash, or ENOTFOUND
	// when there is none or it was revoked.
	TokenByHash(ctx context.Context, hash TokenHash) (Token, error)
	// ListTokens returns tokens ordered by name; revoked ones only when
	// includeRevoked is set.
	ListTokens(ctx context.Context, includeRevoked bool) ([]Token, error)
	// RevokeToken revokes the active token called name at time at, or returns
	// ENOTFOUND.
	RevokeToken(ctx context.Context, name string, at time.Time) error
	// ReplaceToken revokes the active token called t.Name, if there is
	// one, and stores t under hash in its place, in one transaction: a
	// replace that fails has changed nothing, and of replaces of one name
	// at once, each revokes the one before it. replaced says whether a
	// token was revoked.
	ReplaceToken(ctx context.Context, t Token, hash TokenHash) (created Token, replaced bool, err error)
	// RecordTokenUse sets the last-use time of each token id given, keeping a
	// later time already stored.
	RecordTokenUse(ctx context.Context, lastUse map[int64]time.Time) error
	// ActiveTokenHashes returns the hashes of the active tokens, at most
	// max of them, the newest first.
	ActiveTokenHashes(ctx context.Context, max int) ([]TokenHash, error)
}
