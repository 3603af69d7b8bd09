package main

import (
	"net/http/httptest"
	"testing"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
)

func TestCacheSynced(t *testing.T) {
	tests := []struct {
		name      string
		synced    bool
		wantReady bool
	}{
		{"caches synced", true, true},
		{"caches not synced", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check := cacheSynced(&informertest.FakeInformers{Synced: ptr.To(tt.synced)})
			err := check(httptest.NewRequest("GET", "/readyz", nil))
			if got := err == nil; got != tt.wantReady {
				t.Errorf("ready = %v (%v), want %v", got, err, tt.wantReady)
			}
		})
	}
}
