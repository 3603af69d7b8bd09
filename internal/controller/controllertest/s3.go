package controllertest

// Storage locations on an S3 service (testenv.S3Server).

import (
	corev1 "k8s.io/api/core/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// S3Spec is the spec of a location on server's bucket, under the prefix cluster-a, with the
// credential in the Secret named secret (key cloud).
func S3Spec(server *testenv.S3Server, bucket, secret string) cairnv1.BackupStorageLocationSpec {
	return cairnv1.BackupStorageLocationSpec{
		Provider:      cairnv1.StorageProviderS3,
		ObjectStorage: &cairnv1.ObjectStorage{Bucket: bucket, Prefix: "cluster-a"},
		Config:        map[string]string{"endpoint": server.Endpoint(), "region": "us-east-1", "forcePathStyle": "true"},
		Credential:    &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: "cloud"},
	}
}
