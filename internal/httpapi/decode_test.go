package httpapi

import (
	"testing"

	"github.com/plantstore/plantstore"
)

func TestParseInt64(t *testing.T) {
	ok := map[string]int64{
		"0": 0, "-0": 0, "0.0": 0, "0e99999999999": 0, "-0.000e-5": 0,
		"42": 42, "42.0": 42, "4.2e1": 42, "420e-1": 42, "4200E-2": 42, "0.42e2": 42, "42e0": 42,
		"9223372036854775807": 1<<63 - 1, "9.223372036854775807e18": 1<<63 - 1,
		"-9223372036854775808": -1 << 63, "-9223372036854775808.000": -1 << 63, "-9.223372036854775808e18": -1 << 63,
		"1e18": 1e18, "100000000000000000e-17": 1,
	}
	for in, want := range ok {
		got, err := parseInt64(in)
		if err != nil || got != want {
			t.Errorf("parseInt64(%s) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{
		"0.5", "42.1", "4.25e1", "1e-1", "9223372036854775808", "-9223372036854775809",
		"9.223372036854775808e18", "1e19", "1e400", "1e99999999999", "1e-99999999999", "12345678901234567890123",
	} {
		if n, err := parseInt64(in); plantstore.ErrorCode(err) != plantstore.EINVALID {
			t.Errorf("parseInt64(%s) = %d, %v; want %s", in, n, err, plantstore.EINVALID)
		}
	}
}

func BenchmarkDecodeAndValidate(b *testing.B) {
	body := []byte(`{"id":123456789,"name":"Monstera deliciosa","tag":"tropical","note":"ignored"}`)
	b.ReportAllocs()
	for b.Loop() {
		p, err := decodeNewPlant(body)
		if err == nil {
			err = p.Validate()
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeCommon is the body clients send, which the fast path reads.
func BenchmarkDecodeCommon(b *testing.B) {
	body := []byte(`{"id":123456789,"name":"Monstera deliciosa","tag":"tropical"}`)
	b.ReportAllocs()
	for b.Loop() {
		p, err := decodeNewPlant(body)
		if err == nil {
			err = p.Validate()
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}
