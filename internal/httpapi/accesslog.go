package httpapi

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// accessEntry is what the access log says of one request.
type accessEntry struct {
	start    time.Time
	method   string
	path     string
	status   int
	duration time.Duration
	bytes    int64
	info     *requestInfo
	remote   string
	client   string // the address a trusted proxy forwarded for; "" when none
}

// logRequest writes the access log line of one request: to
// Config.AccessLog when it is set, as a JSON line shaped exactly as
// Logger's JSON handler would shape it, but formatted by hand; otherwise
// through Logger. The line is the one piece of logging every request
// pays for, and slog's general machinery (the caller's frame, a record,
// reflection for a float) cost about as much as the rest of a cached read.
func (s *Server) logRequest(ctx context.Context, e *accessEntry) {
	if s.cfg.AccessLog != nil {
		s.writeAccessLine(e)
		return
	}
	attrs := append(make([]slog.Attr, 0, 10),
		slog.String("method", e.method),
		slog.String("path", e.path),
		slog.Int("status", e.status),
		slog.Float64("duration_ms", durationMillis(e.duration)),
		slog.Int64("bytes", e.bytes),
		slog.String("request_id", e.info.id),
		slog.String("token", e.info.token),
		slog.String("remote", e.remote),
	)
	if e.client != "" {
		attrs = append(attrs, slog.String("client", e.client))
	}
	if e.info.limit != "" {
		attrs = append(attrs, slog.String("limit", e.info.limit))
	}
	// Timed as the JSON line is: at the request's start.
	if h := s.log.Handler(); h.Enabled(ctx, slog.LevelInfo) {
		r := slog.NewRecord(e.start, slog.LevelInfo, "request", 0)
		r.AddAttrs(attrs...)
		h.Handle(ctx, r)
	}
}

func durationMillis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

var accessLines = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

func (s *Server) writeAccessLine(e *accessEntry) {
	bp := accessLines.Get().(*[]byte)
	b := append((*bp)[:0], `{"time":"`...)
	b = e.start.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","level":"INFO","msg":"request","method":`...)
	b = appendLogString(b, e.method)
	b = append(b, `,"path":`...)
	b = appendLogString(b, e.path)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(e.status), 10)
	b = append(b, `,"duration_ms":`...)
	// What encoding/json, which slog calls for floats, writes for a
	// float in this range.
	b = strconv.AppendFloat(b, durationMillis(e.duration), 'f', -1, 64)
	b = append(b, `,"bytes":`...)
	b = strconv.AppendInt(b, e.bytes, 10)
	b = append(b, `,"request_id":`...)
	b = appendLogString(b, e.info.id)
	b = append(b, `,"token":`...)
	b = appendLogString(b, e.info.token)
	b = append(b, `,"remote":`...)
	b = appendLogString(b, e.remote)
	if e.client != "" {
		b = append(b, `,"client":`...)
		b = appendLogString(b, e.client)
	}
	if e.info.limit != "" {
		b = append(b, `,"limit":`...)
		b = appendLogString(b, e.info.limit)
	}
	b = append(b, "}\n"...)
	s.cfg.AccessLog.Write(b)
	*bp = b
	accessLines.Put(bp)
}

// appendLogString quotes s as slog's JSON handler does, so a log line
// can never be split or forged by what a client sends: control
// characters, quotes and backslashes escaped, invalid UTF-8 as U+FFFD,
// and U+2028 and U+2029 escaped too.
func appendLogString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
