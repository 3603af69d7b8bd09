package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

func newLocationCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "location", Aliases: []string{"locations", "backup-location"}, Short: "Manage backup storage locations (in Cairn's namespace)"}
	cmd.AddCommand(newGetCommand(e, locationKind), newLocationCreateCommand(e), newLocationSetDefaultCommand(e))
	return cmd
}

// locationKind is what the commands every kind has need to know of storage locations, in Cairn's namespace.
var locationKind = kind[cairnv1.BackupStorageLocation, cairnv1.BackupStorageLocationList]{
	name: "storage location", plural: "storage locations", columns: locationColumns, inOperatorNamespace: true,
	items: func(l *cairnv1.BackupStorageLocationList) *[]cairnv1.BackupStorageLocation { return &l.Items },
}

// locationCreateOptions are `location create`'s flags.
type locationCreateOptions struct {
	provider, bucket, prefix string
	config                   map[string]string
	credential               string
	isDefault                bool
	accessMode               string
	format                   string
	// veleroPassword is the Secret and key of Velero's repository password, SECRET=KEY.
	veleroPassword string
	// teamNamespaces and teamMaxTTL are spec.teamLimits: a label selector of the team
	// namespaces that may use the location, and the longest ttl a team backup may ask for.
	teamNamespaces string
	teamMaxTTL     time.Duration
}

// teamLimits are the spec.teamLimits the options say; nil when they say none.
func (o *locationCreateOptions) teamLimits() (*cairnv1.LocationTeamLimits, error) {
	var limits cairnv1.LocationTeamLimits
	if o.teamNamespaces != "" {
		sel, err := metav1.ParseToLabelSelector(o.teamNamespaces)
		if err != nil {
			return nil, usageErrorf("invalid --team-namespaces %q: %v", o.teamNamespaces, err)
		}
		limits.NamespaceSelector = sel
	}
	switch {
	case o.teamMaxTTL < 0 || o.teamMaxTTL > 0 && o.teamMaxTTL < time.Second:
		return nil, usageErrorf("invalid --team-max-ttl %s: want at least 1s", o.teamMaxTTL)
	case o.teamMaxTTL > 0:
		limits.MaxTTL = &metav1.Duration{Duration: o.teamMaxTTL}
	}
	if limits == (cairnv1.LocationTeamLimits{}) {
		return nil, nil
	}
	return &limits, nil
}

// location is the BackupStorageLocation the options say.
func (o *locationCreateOptions) location(name, namespace string) (*cairnv1.BackupStorageLocation, error) {
	bsl := &cairnv1.BackupStorageLocation{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProvider(o.provider), Config: o.config,
			Default: o.isDefault, AccessMode: cairnv1.AccessMode(o.accessMode)},
	}
	switch bsl.Spec.Provider {
	case cairnv1.StorageProviderFilesystem, cairnv1.StorageProviderS3, cairnv1.StorageProviderAzure, cairnv1.StorageProviderGCS:
	default:
		return nil, usageErrorf("invalid --provider %q: want filesystem, s3, azure or gcs", o.provider)
	}
	switch bsl.Spec.AccessMode {
	case "", cairnv1.AccessModeReadWrite, cairnv1.AccessModeReadOnly:
	default:
		return nil, usageErrorf("invalid --access-mode %q: want ReadWrite or ReadOnly", o.accessMode)
	}
	switch cairnv1.LocationFormat(o.format) {
	case "", cairnv1.LocationFormatCairn:
	case cairnv1.LocationFormatVelero:
		// Cairn never writes to a Velero bucket: ReadOnly is implied, and ReadWrite refused.
		if bsl.Spec.AccessMode == cairnv1.AccessModeReadWrite {
			return nil, usageErrorf("--format velero cannot be --access-mode ReadWrite: Cairn never writes to a Velero bucket")
		}
		if o.isDefault {
			return nil, usageErrorf("--format velero cannot be --default: backups cannot go to a Velero location")
		}
		bsl.Spec.Format, bsl.Spec.AccessMode = cairnv1.LocationFormatVelero, cairnv1.AccessModeReadOnly
	default:
		return nil, usageErrorf("invalid --format %q: want cairn or velero", o.format)
	}
	if o.veleroPassword != "" {
		secret, key, ok := strings.Cut(o.veleroPassword, "=")
		switch {
		case bsl.Spec.Format != cairnv1.LocationFormatVelero:
			return nil, usageErrorf("--velero-repository-password needs --format velero")
		case !ok || secret == "" || key == "":
			return nil, usageErrorf("invalid --velero-repository-password %q: want SECRET=KEY", o.veleroPassword)
		}
		bsl.Spec.Velero = &cairnv1.VeleroLocation{RepositoryPasswordSecretRef: &cairnv1.SecretKeyReference{Name: secret, Key: key}}
	}
	if o.bucket != "" || o.prefix != "" {
		bsl.Spec.ObjectStorage = &cairnv1.ObjectStorage{Bucket: o.bucket, Prefix: o.prefix}
	}
	if o.credential != "" {
		secret, key, ok := strings.Cut(o.credential, "=")
		if !ok || secret == "" || key == "" {
			return nil, usageErrorf("invalid --credential %q: want SECRET=KEY", o.credential)
		}
		bsl.Spec.Credential = &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key}
	}
	limits, err := o.teamLimits()
	if err != nil {
		return nil, err
	}
	bsl.Spec.TeamLimits = limits
	return bsl, nil
}

func newLocationCreateCommand(e *env) *cobra.Command {
	o := &locationCreateOptions{}
	cmd := &cobra.Command{
		Use:   "create NAME --provider filesystem|s3|azure|gcs",
		Short: "Create a storage location",
		Example: `  cairn location create local --provider filesystem --config path=/var/lib/cairn --default
  cairn location create s3 --provider s3 --bucket backups --prefix cluster-a \
      --config region=eu-west-1,endpoint=https://s3.example.com --credential cairn-s3=cloud
  cairn location create azure --provider azure --bucket backups --prefix cluster-a \
      --config storageAccount=cairnbackups --credential cairn-azure=cloud
  cairn location create gcs --provider gcs --bucket cairn-backups --prefix cluster-a --credential cairn-gcs=service-account.json
  cairn location create from-velero --format velero --provider s3 --bucket velero-backups --prefix velero \
      --config region=eu-west-1 --credential cairn-s3=cloud --velero-repository-password velero-repo-credentials=repository-password
  cairn location create teams --provider filesystem --config path=/var/lib/cairn-teams \
      --team-namespaces 'tier in (prod,staging)' --team-max-ttl 720h`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			bsl, err := o.location(args[0], e.locationNamespace())
			if err != nil {
				return err
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			if err := c.Create(context.Background(), bsl); err != nil {
				if apierrors.IsAlreadyExists(err) {
					return fmt.Errorf("storage location %q already exists in namespace %s", bsl.Name, bsl.Namespace)
				}
				return err
			}
			e.printf("Storage location %s created in namespace %s; `cairn location get %s` shows when it is Available.\n", bsl.Name, bsl.Namespace, bsl.Name)
			return nil
		},
	}
	cmd.Flags().StringVar(&o.provider, "provider", "", "filesystem, s3, azure or gcs.")
	cmd.Flags().StringVar(&o.bucket, "bucket", "", "The bucket (s3, gcs) or blob container (azure).")
	cmd.Flags().StringVar(&o.prefix, "prefix", "", "The prefix (directory) under which Cairn keeps its objects.")
	cmd.Flags().StringToStringVar(&o.config, "config", nil, "Provider settings, k=v comma-separated: path (filesystem); region, endpoint, publicURL, forcePathStyle, insecureSkipTLSVerify, profile (s3); storageAccount, endpoint, publicURL (azure); endpoint, publicURL (gcs).")
	cmd.Flags().StringVar(&o.credential, "credential", "", "The Secret and key holding the credentials, SECRET=KEY: an s3 credentials file, azure NAME=value lines (AZURE_STORAGE_ACCOUNT_ACCESS_KEY or AZURE_STORAGE_SAS_TOKEN), a gcs service account JSON key (docs/storage.md).")
	cmd.Flags().BoolVar(&o.isDefault, "default", false, "Make it the location of backups that name none.")
	cmd.Flags().StringVar(&o.accessMode, "access-mode", "", "ReadWrite (default) or ReadOnly (restores only, as for a second cluster).")
	cmd.Flags().StringVar(&o.format, "format", "", "cairn (default) or velero: the bucket and prefix of a Velero backup storage location, read only (docs/migrating-from-velero.md).")
	cmd.Flags().StringVar(&o.teamNamespaces, "team-namespaces", "", "A label selector of the team namespaces whose backups may use the location, such as 'tier=prod' (default: all; backups in Cairn's namespace are never limited; docs/storage.md, \"Limits for teams\").")
	cmd.Flags().DurationVar(&o.teamMaxTTL, "team-max-ttl", 0, "The longest ttl a backup in a team namespace may ask for there, such as 720h (default: no limit); a ttl of 0s, never to expire, is over it.")
	cmd.Flags().StringVar(&o.veleroPassword, "velero-repository-password", "", "With --format velero: the Secret and key holding the password of Velero's kopia repositories, SECRET=KEY, so that the pod volumes Velero copied are restored (docs/migrating-from-velero.md, \"Volume data\").")
	return cmd
}

func newLocationSetDefaultCommand(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "set-default NAME",
		Short: "Make a location the default and every other one not",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			ns := e.locationNamespace()
			c, err := e.client()
			if err != nil {
				return err
			}
			ctx := context.Background()
			var target cairnv1.BackupStorageLocation
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: args[0]}, &target); err != nil {
				return notFound(err, "storage location", args[0], ns)
			}
			var list cairnv1.BackupStorageLocationList
			if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
				return err
			}
			// The new default first: there is never a moment without one.
			if err := c.Patch(ctx, &target, defaultPatch(true)); err != nil {
				return err
			}
			for i := range list.Items {
				l := &list.Items[i]
				if l.Name != target.Name && l.Spec.Default {
					if err := c.Patch(ctx, l, defaultPatch(false)); err != nil {
						return err
					}
					e.printf("Storage location %s is no longer the default.\n", l.Name)
				}
			}
			e.printf("Storage location %s is the default.\n", target.Name)
			return nil
		},
	}
}

func defaultPatch(isDefault bool) client.Patch {
	return client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"default":%t}}`, isDefault)))
}
