// Command httpd is the test app of the one-node cluster's e2e suite: a static file server.
// It serves the directory -root (where the app's ConfigMap and Secret are mounted) on -listen,
// so that a test reads back over HTTP what the pod was given.
//
// With -get URL it is a client instead, as a pod of the suite reaching a Service: it resolves
// URL's host with the pod's resolver, prints "HOST resolves to ADDR..." and then the body of a
// GET of URL, and exits 1 when either fails (or the answer is not 200).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

func main() {
	root := flag.String("root", "/srv", "The directory to serve.")
	listen := flag.String("listen", ":8080", "The address to listen on.")
	get := flag.String("get", "", "Instead of serving, resolve this URL's host, print its addresses, GET it and print the body.")
	flag.Parse()
	if *get != "" {
		if err := fetch(*get, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	server := &http.Server{Addr: *listen, Handler: http.FileServer(http.Dir(*root)), ReadHeaderTimeout: 10 * time.Second}
	log.Printf("Serving %s on %s", *root, *listen)
	log.Fatal(server.ListenAndServe())
}

// fetch resolves rawURL's host, writes its addresses and then the body of a GET of rawURL to w.
func fetch(rawURL string, w io.Writer) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupHost(ctx, u.Hostname())
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s resolves to %s\n", u.Hostname(), strings.Join(addrs, " "))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", rawURL, resp.Status)
	}
	_, err = io.Copy(w, resp.Body)
	return err
}
