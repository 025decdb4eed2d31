package httpapi

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/plantstore/plantstore"
)

// decodeNewPlant reads the body of a create: a NewPlant, whose id is
// required.
func decodeNewPlant(body []byte) (plantstore.Plant, error) {
	p, _, err := decodePlant(body, "NewPlant", true)
	return p, err
}

// decodePlant reads a plant from body, strictly: one JSON object in valid
// UTF-8 with no duplicate member names, an integral id in int64 range,
// string name and tag. Member names match exactly; other members are
// skipped, as the schema is open. It reports whether an id was present.
// Lengths and characters are left to Plant.Validate.
//
// It walks tokens itself rather than unmarshalling into a struct because a
// struct cannot tell a missing member from null, nor a missing tag from
// "tag": null, and the contract rejects nulls.
func decodePlant(body []byte, schema string, idRequired bool) (p plantstore.Plant, haveID bool, err error) {
	p, haveID, err = decodeMembers(body, schema)
	if err == nil && idRequired && !haveID {
		err = invalid("id: required member is missing")
	}
	return p, haveID, err
}

func decodeMembers(body []byte, schema string) (plantstore.Plant, bool, error) {
	if p, haveID, ok := scanPlant(body); ok {
		return p, haveID, nil
	}
	return walkPlant(body, schema)
}

// walkPlant reads any body token by token, and names what is wrong with it.
func walkPlant(body []byte, schema string) (plantstore.Plant, bool, error) {
	dec := jsontext.NewDecoder(bytes.NewReader(body))
	tok, err := dec.ReadToken()
	if errors.Is(err, io.EOF) {
		return plantstore.Plant{}, false, invalid("the request body is empty; a %s JSON object is required", schema)
	}
	if err != nil {
		return plantstore.Plant{}, false, syntaxError(err)
	}
	if tok.Kind() != '{' {
		return plantstore.Plant{}, false, invalid("the request body must be a JSON object (%s), not %s", schema, kindName(tok.Kind()))
	}

	var p plantstore.Plant
	var haveID, haveName bool
	for {
		tok, err := dec.ReadToken()
		if err != nil {
			return plantstore.Plant{}, false, syntaxError(err)
		}
		if tok.Kind() == '}' {
			break
		}
		switch member := tok.String(); member {
		case "id":
			v, err := dec.ReadValue()
			if err != nil {
				return plantstore.Plant{}, false, syntaxError(err)
			}
			if v.Kind() != '0' {
				return plantstore.Plant{}, false, invalid("id: must be an integer, not %s", kindName(v.Kind()))
			}
			id, err := parseInt64(string(v))
			if err != nil {
				return plantstore.Plant{}, false, err
			}
			p.ID, haveID = id, true
		case "name", "tag":
			v, err := dec.ReadToken()
			if err != nil {
				return plantstore.Plant{}, false, syntaxError(err)
			}
			if v.Kind() != '"' {
				return plantstore.Plant{}, false, invalid("%s: must be a string, not %s", member, kindName(v.Kind()))
			}
			s := v.String()
			if member == "name" {
				p.Name, haveName = s, true
			} else {
				p.Tag = &s
			}
		default:
			if err := dec.SkipValue(); err != nil {
				return plantstore.Plant{}, false, syntaxError(err)
			}
		}
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		if err != nil && !isTrailingGarbage(err) {
			return plantstore.Plant{}, false, syntaxError(err)
		}
		return plantstore.Plant{}, false, invalid("unexpected data after the JSON object")
	}
	if !haveName {
		return plantstore.Plant{}, false, invalid("name: required member is missing")
	}
	return p, haveID, nil
}

func invalid(format string, args ...any) error {
	return plantstore.Errorf(plantstore.EINVALID, format, args...)
}

func syntaxError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "jsontext: ")
	if errors.Is(err, io.ErrUnexpectedEOF) {
		msg = "unexpected end of input"
	}
	return plantstore.Errorf(plantstore.EINVALID, "malformed JSON: %s", msg)
}

// isTrailingGarbage tells a syntax error in what follows a complete object
// (which is just more data) from an I/O error.
func isTrailingGarbage(err error) bool {
	_, ok := errors.AsType[*jsontext.SyntacticError](err)
	return ok
}

func kindName(k jsontext.Kind) string {
	switch k {
	case 'n':
		return "null"
	case 'f', 't':
		return "a boolean"
	case '"':
		return "a string"
	case '0':
		return "a number"
	case '{':
		return "an object"
	case '[':
		return "an array"
	}
	return "invalid JSON"
}

// parseInt64 converts a JSON number to int64 when its value is an integer in
// range. Like JSON Schema's "integer", it accepts 1.0 and 1e3 but not 1.5;
// it works on the decimal digits, so no precision is lost to floating point.
func parseInt64(num string) (int64, error) {
	if n, err := strconv.ParseInt(num, 10, 64); err == nil {
		return n, nil
	}
	outOfRange := invalid("id: must be an integer from %d to %d, got %s", int64(-1<<63), int64(1<<63-1), truncate(num, 40))
	notInteger := invalid("id: must be an integer, got %s", truncate(num, 40))

	neg := strings.HasPrefix(num, "-")
	num = strings.TrimPrefix(num, "-")
	mantissa, exponent, hasExp := strings.Cut(strings.ToLower(num), "e")
	intPart, fracPart, _ := strings.Cut(mantissa, ".")
	digits := strings.TrimLeft(intPart+fracPart, "0")
	scale := -len(fracPart)
	if hasExp {
		e, err := strconv.ParseInt(exponent, 10, 32)
		if err != nil { // more than 9 digits of exponent
			if digits == "" {
				return 0, nil
			}
			if strings.HasPrefix(exponent, "-") {
				return 0, notInteger
			}
			return 0, outOfRange
		}
		scale += int(e)
	}
	if digits == "" {
		return 0, nil // zero, however written
	}
	trimmed := strings.TrimRight(digits, "0")
	scale += len(digits) - len(trimmed)
	digits = trimmed
	if scale < 0 {
		return 0, notInteger
	}
	if len(digits)+scale > 19 {
		return 0, outOfRange
	}
	digits += strings.Repeat("0", scale)
	if neg {
		digits = "-" + digits
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return 0, outOfRange
	}
	return n, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// scanPlant is the fast path of decodeMembers, for the bodies clients
// actually send: one object of plain members "id", "name" and "tag", each
// at most once, an id of at most 18 digits, strings without escapes. It
// reads such a body in one pass with two allocations (the strings). On
// anything else (an escape, another member, a number it would have to
// think about, a syntax error) it gives up with ok false, and the token
// walk above decides, with its precise messages. It never accepts what
// the walk would refuse, nor reads a body differently (FuzzScanPlant).
func scanPlant(body []byte) (p plantstore.Plant, haveID, ok bool) {
	var haveName, haveTag bool
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return p, false, false
	}
	for {
		i = skipSpace(body, i+1)
		key, next, ok := scanPlainString(body, i)
		if !ok {
			return p, false, false
		}
		i = skipSpace(body, next)
		if i >= len(body) || body[i] != ':' {
			return p, false, false
		}
		i = skipSpace(body, i+1)
		switch string(key) { // no allocation: the compiler compares in place
		case "id":
			if haveID {
				return p, false, false
			}
			if p.ID, i, ok = scanSmallInt(body, i); !ok {
				return p, false, false
			}
			haveID = true
		case "name", "tag":
			value, next, ok := scanPlainString(body, i)
			if !ok {
				return p, false, false
			}
			i = next
			if key[0] == 'n' {
				if haveName {
					return p, false, false
				}
				p.Name, haveName = string(value), true
			} else {
				if haveTag {
					return p, false, false
				}
				tag := string(value)
				p.Tag, haveTag = &tag, true
			}
		default:
			return p, false, false
		}
		i = skipSpace(body, i)
		if i >= len(body) {
			return p, false, false
		}
		if body[i] == '}' {
			break
		}
		if body[i] != ',' {
			return p, false, false
		}
	}
	if skipSpace(body, i+1) != len(body) || !haveName {
		return p, false, false
	}
	return p, haveID, true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanPlainString reads a JSON string at b[i] that has no escapes and no
// control characters and is valid UTF-8, returning its contents and the
// index after its closing quote.
func scanPlainString(b []byte, i int) (value []byte, next int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	start := i + 1
	ascii := true
	for j := start; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			if !ascii && !utf8.Valid(b[start:j]) {
				return nil, 0, false
			}
			return b[start:j], j + 1, true
		case c == '\\' || c < 0x20:
			return nil, 0, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, 0, false
}

// scanSmallInt reads a JSON integer of at most 18 digits (so it cannot
// overflow int64) at b[i], with no fraction or exponent.
func scanSmallInt(b []byte, i int) (n int64, next int, ok bool) {
	neg := i < len(b) && b[i] == '-'
	if neg {
		i++
	}
	start := i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		n = n*10 + int64(b[i]-'0')
		i++
	}
	digits := i - start
	if digits == 0 || digits > 18 || (digits > 1 && b[start] == '0') {
		return 0, 0, false
	}
	if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
		return 0, 0, false
	}
	if neg {
		n = -n
	}
	return n, i, true
}
