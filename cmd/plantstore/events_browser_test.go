package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The browser example of docs/events.md works in a real browser: a page
// on an origin --cors-origins names follows the feed with EventSource,
// its token in the query, and sees the plants a fetch creates; the page
// then stops the stream. Like the other browser tests, it needs Chromium,
// and fails without it when PLANTSTORE_TEST_BROWSER is set (CI).
func TestEventSourceInBrowser(t *testing.T) {
	browser := requireBrowser(t)
	dir := t.TempDir()
	reader := mustToken(t, dir, "--name", "dashboard", "--scope", "plants:read")
	writer := mustToken(t, dir, "--name", "writer")
	var api string
	results := make(chan string, 1)
	page := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			results <- string(b)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, eventSourcePage, api, reader, writer)
	}))
	defer page.Close()
	s := serve(t, dir, "--cors-origins", "http://"+page.Listener.Addr().String())
	api = s.url
	page.Start()
	got := browse(t, browser, page.URL, results)
	if !strings.Contains(got, "plant.created 1 Monstera | plant.updated 1 Monstera tropical | plant.deleted 1 Monstera tropical") {
		t.Errorf("the page saw %q", got)
	}
}

// eventSourcePage follows the feed of the API (%s) with a read token
// (%s), as docs/events.md shows, while it creates, updates and deletes a
// plant with a write token (%s); it reports the three events it saw.
const eventSourcePage = `<!DOCTYPE html>
<html><head><title>events</title></head><body><ul id="feed"></ul>
<script>
const api = %q, reader = %q, writer = %q;
const seen = [];
const report = (text) => fetch("/result", {method: "POST", body: text});
const feed = new EventSource(api + "/events?access_token=" + encodeURIComponent(reader));
for (const type of ["plant.created", "plant.updated", "plant.deleted"]) {
  feed.addEventListener(type, (message) => {
    const event = JSON.parse(message.data);
    seen.push(event.type + " " + event.plant.id + " " + event.plant.name + (event.plant.tag ? " " + event.plant.tag : ""));
    if (seen.length === 3) {
      feed.close();
      report(seen.join(" | "));
    }
  });
}
feed.onopen = async () => {
  const send = (method, path, body) => fetch(api + path, {method,
    headers: {"Authorization": "Bearer " + writer, "Content-Type": "application/json"},
    body: body && JSON.stringify(body)});
  await send("POST", "/plants", {id: 1, name: "Monstera"});
  await send("PUT", "/plants/1", {name: "Monstera", tag: "tropical"});
  await send("DELETE", "/plants/1");
};
feed.onerror = () => { if (feed.readyState === EventSource.CLOSED) report("closed"); };
</script></body></html>`
