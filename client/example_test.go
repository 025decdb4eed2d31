package client_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log"
	"os"

	"github.com/plantstore/plantstore/client"
)

// The README shows this example; it compiles with the tests.
func Example() {
	ctx := context.Background()
	c, err := client.New("http://127.0.0.1:8080", os.Getenv("PLANTSTORE_TOKEN"))
	if err != nil {
		log.Fatal(err)
	}

	if _, err := c.Create(ctx, client.Plant{ID: 42, Name: "Monstera", Tag: client.Tag("tropical")}); err != nil {
		log.Fatal(err)
	}
	// Update replaces the whole plant: give the tag to keep it, as a nil Tag removes it.
	if _, err := c.Update(ctx, client.Plant{ID: 42, Name: "Monstera deliciosa", Tag: client.Tag("tropical")}); err != nil {
		log.Fatal(err)
	}

	// Every plant, page after page.
	for p, err := range c.All(ctx, client.ListOptions{Limit: 500}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(p.ID, p.Name)
	}

	if _, err := c.Get(ctx, 404); client.StatusCode(err) == 404 {
		fmt.Println("no plant 404")
	}
	if err := c.Delete(ctx, 42); err != nil {
		log.Fatal(err)
	}
}

// A client that waits out the service's limits (429, 503, with their
// Retry-After) and dropped connections, up to three retries, and trusts
// a private CA.
func ExampleWithRetries() {
	pem, err := os.ReadFile("/etc/plantstore/ca.pem")
	if err != nil {
		log.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		log.Fatal("no certificate in /etc/plantstore/ca.pem")
	}
	c, err := client.New("https://plants.internal:8443", os.Getenv("PLANTSTORE_TOKEN"),
		client.WithRetries(3), client.WithTLSConfig(&tls.Config{RootCAs: roots}))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Get(context.Background(), 42); client.StatusCode(err) == 429 {
		// After 3 retries, or at once when the service asked for a wait
		// longer than the policy's MaxDelay (10 s).
		fmt.Printf("still limited; the service says to wait %v\n", client.RetryAfter(err))
	}
}
