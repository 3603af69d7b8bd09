// Command httpd is the test app of the one-node cluster's e2e suite: a static file server.
// It serves the directory -root (where the app's ConfigMap and Secret are mounted) on -listen,
// so that a test reads back over HTTP what the pod was given.
package main

import (
	"flag"
	"log"
	"net/http"
	"time"
)

func main() {
	root := flag.String("root", "/srv", "The directory to serve.")
	listen := flag.String("listen", ":8080", "The address to listen on.")
	flag.Parse()
	server := &http.Server{Addr: *listen, Handler: http.FileServer(http.Dir(*root)), ReadHeaderTimeout: 10 * time.Second}
	log.Printf("Serving %s on %s", *root, *listen)
	log.Fatal(server.ListenAndServe())
}
