package velerofmt

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/cairn-backup/cairn/internal/storage"
)

// veleroResults is Velero's <name>-results.gz: warnings and errors, each grouped as Velero's
// own, the cluster's, and per namespace.
type veleroResults struct {
	Warnings veleroMessages `json:"warnings"`
	Errors   veleroMessages `json:"errors"`
}

type veleroMessages struct {
	Velero     []string            `json:"velero,omitempty"`
	Cluster    []string            `json:"cluster,omitempty"`
	Namespaces map[string][]string `json:"namespaces,omitempty"`
}

// itemResult and results have the JSON shape of Cairn's results file (docs/format.md).
type itemResult struct {
	Item    string `json:"item"`
	Message string `json:"message"`
}

type results struct {
	Warnings []itemResult `json:"warnings,omitempty"`
	Errors   []itemResult `json:"errors,omitempty"`
}

// ConvertResults turns Velero's results file (gzip-compressed JSON, its decompressed size
// capped as every side file's) into Cairn's, gzip-compressed: a message of namespace ns is an
// item "velero/<ns>/-" (so the CLI groups it under ns), Velero's own and the cluster's are
// items "velero" and "cluster". key names the file in errors.
func ConvertResults(r io.Reader, key string) ([]byte, error) {
	var in veleroResults
	if err := storage.DecodeGzipJSON(r, key, 0, &in); err != nil {
		return nil, err
	}
	out := results{Warnings: convertMessages(in.Warnings), Errors: convertMessages(in.Errors)}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	if err := json.NewEncoder(gz).Encode(out); err != nil {
		return nil, fmt.Errorf("encoding the results of %s: %w", key, err)
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func convertMessages(m veleroMessages) []itemResult {
	var out []itemResult
	add := func(item string, messages []string) {
		for _, msg := range messages {
			out = append(out, itemResult{Item: item, Message: strings.TrimSpace(msg)})
		}
	}
	add("velero", m.Velero)
	add("cluster", m.Cluster)
	namespaces := make([]string, 0, len(m.Namespaces))
	for ns := range m.Namespaces {
		namespaces = append(namespaces, ns)
	}
	slices.Sort(namespaces)
	for _, ns := range namespaces {
		add("velero/"+ns+"/-", m.Namespaces[ns])
	}
	return out
}
