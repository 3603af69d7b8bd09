package controller_test

import "k8s.io/apimachinery/pkg/runtime/schema"

// What the specs of the owners still in this package use from specs that moved with their
// owner (operations/restoreasync_test.go): a copy, until they move too.
var volumeSnapshotContentGVK = schema.GroupVersionKind{Group: "snapshot.storage.k8s.io", Version: "v1", Kind: "VolumeSnapshotContent"}
