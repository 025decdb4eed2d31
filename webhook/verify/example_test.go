package verify_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/plantstore/plantstore/webhook/verify"
)

// A receiver: it reads the body whole, verifies it before trusting any of
// it, and answers 2xx only then. plantstore retries anything else.
func Example() {
	// What plantstore webhook add printed, from the receiver's configuration.
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		if err := verify.Verify(secret, r.Header, body, time.Now(), 0); err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var plant struct {
			ID   int64   `json:"id"`
			Name string  `json:"name"`
			Tag  *string `json:"tag"`
		}
		if err := json.Unmarshal(body, &plant); err != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		// webhook-id is the same on every retry: drop the ones seen before.
		fmt.Printf("new plant %d %q (event %s)\n", plant.ID, plant.Name, r.Header.Get("webhook-id"))
		w.WriteHeader(http.StatusNoContent)
	}))
	defer receiver.Close()

	// A delivery as plantstore sends it, then the same headers with a body
	// changed on the way.
	key, _ := verify.ParseSecret(secret)
	const id, signed = "msg_2qk4hbd0t1c5e9v8mz3r6y7xwn", `{"id":7,"name":"Fern","tag":"indoor"}`
	for _, body := range []string{signed, `{"id":7,"name":"Fern (forged)"}`} {
		now := time.Now()
		req, _ := http.NewRequest(http.MethodPost, receiver.URL, bytes.NewReader([]byte(body)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(verify.HeaderID, id)
		req.Header.Set(verify.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
		req.Header.Set(verify.HeaderSignature, verify.Sign(key, id, now, []byte(signed)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Println(resp.Status)
	}
	// Output:
	// new plant 7 "Fern" (event msg_2qk4hbd0t1c5e9v8mz3r6y7xwn)
	// 204 No Content
	// 401 Unauthorized
}

// VerifyKey takes the key once parsed, for a receiver that verifies many
// messages; errors.Is tells the reasons apart.
func ExampleVerifyKey() {
	key, err := verify.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		panic(err)
	}
	sent := time.Unix(1614265330, 0)
	body := []byte(`{"test": 2432232314}`)
	h := http.Header{}
	h.Set(verify.HeaderID, "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set(verify.HeaderTimestamp, "1614265330")
	h.Set(verify.HeaderSignature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")

	fmt.Println(verify.VerifyKey(key, h, body, sent.Add(time.Minute), 0))
	fmt.Println(verify.VerifyKey(key, h, body, sent.Add(time.Hour), 0))
	// Output:
	// <nil>
	// verify webhook: timestamp is stale (1614265330, tolerance 5m0s)
}
