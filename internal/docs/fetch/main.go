// Command fetch takes the API reference page's renderer, Redoc, from the
// npm registry: a pinned version whose tarball must match the registry's
// published SHA-512, so what is embedded is what npm serves and nothing
// else. It writes the standalone bundle gzipped (deterministically: the
// same tarball always gives the same bytes) and Redoc's licence beside it.
//
//	go generate ./internal/docs        # after changing the version below
//	go run ./internal/docs/fetch -check  # CI: the committed files are npm's
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// The pinned release, and npm's dist.integrity for its tarball
// (npm view redoc@VERSION dist.integrity).
const (
	version   = "3.0.1"
	integrity = "sha512-KDfoKaYW19LCl4YStgBnwlaNjYEFfs5zCNt1s1WZ2YM5u8d26Yuzd2l43fZO851ZsgIMe/D640fDJkD8eaRQKQ=="
	tarball   = "https://registry.npmjs.org/redoc/-/redoc-" + version + ".tgz"
)

// The files written, relative to -dir.
const (
	bundleFile  = "redoc.standalone.js.gz"
	licenseFile = "redoc.LICENSE"
)

func main() {
	dir := flag.String("dir", ".", "where the embedded files live")
	check := flag.Bool("check", false, "compare the files in -dir with npm's instead of writing them")
	flag.Parse()
	if err := run(*dir, *check); err != nil {
		fmt.Fprintln(os.Stderr, "fetch:", err)
		os.Exit(1)
	}
}

func run(dir string, check bool) error {
	tgz, err := download(tarball)
	if err != nil {
		return err
	}
	sum := sha512.Sum512(tgz)
	if got := "sha512-" + base64.StdEncoding.EncodeToString(sum[:]); got != integrity {
		return fmt.Errorf("%s: integrity %s, want %s", tarball, got, integrity)
	}
	files, err := extract(tgz, "package/bundles/redoc.standalone.js", "package/LICENSE")
	if err != nil {
		return err
	}
	bundle, err := gzipDeterministic(files["package/bundles/redoc.standalone.js"])
	if err != nil {
		return err
	}
	want := map[string][]byte{bundleFile: bundle, licenseFile: files["package/LICENSE"]}
	for name, content := range want {
		path := filepath.Join(dir, name)
		if check {
			have, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if !bytes.Equal(have, content) {
				return fmt.Errorf("%s differs from redoc %s on npm: run go generate ./internal/docs", path, version)
			}
			continue
		}
		if err := os.WriteFile(path, content, 0o644); err != nil {
			return err
		}
	}
	if check {
		fmt.Printf("the embedded Redoc is npm's redoc@%s (%s)\n", version, integrity)
	}
	return nil
}

func download(url string) ([]byte, error) {
	client := &http.Client{Timeout: 2 * time.Minute}
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return io.ReadAll(io.LimitReader(resp.Body, 64<<20))
}

// extract returns the named files of a gzipped tarball.
func extract(tgz []byte, names ...string) (map[string][]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, err
	}
	wanted := map[string]bool{}
	for _, n := range names {
		wanted[n] = true
	}
	found := map[string][]byte{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if wanted[h.Name] {
			if found[h.Name], err = io.ReadAll(tr); err != nil {
				return nil, err
			}
		}
	}
	for _, n := range names {
		if found[n] == nil {
			return nil, fmt.Errorf("%s not in the tarball", n)
		}
	}
	return found, nil
}

// gzipDeterministic compresses with no name and no time in the header.
func gzipDeterministic(b []byte) ([]byte, error) {
	var out bytes.Buffer
	zw, err := gzip.NewWriterLevel(&out, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
