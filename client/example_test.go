package client_test

import (
	"context"
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
	if _, err := c.Update(ctx, client.Plant{ID: 42, Name: "Monstera deliciosa"}); err != nil {
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
