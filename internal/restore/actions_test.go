package restore

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// actionCase is one row of an action's table: the item (as Prepare would pass it), the
// restore's options and facts, and the item or skip expected.
type actionCase struct {
	name       string
	obj        string
	opts       Options
	facts      Facts
	want       string // the item returned; "" when skipped
	skipReason string // a part of the skip reason
}

func runActionCases(t *testing.T, a Action, gr schema.GroupResource, tests []actionCase) {
	t.Helper()
	if !actionApplies(a, gr) {
		t.Fatalf("%s does not apply to %s", a.Name(), gr)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			original := item(t, tt.obj)
			before := original.DeepCopy()
			in := ActionInput{Item: original.DeepCopy(), Original: original, Options: tt.opts, Facts: tt.facts}
			out, err := a.Execute(context.Background(), in)
			if err != nil {
				t.Fatalf("Execute: %v", err)
			}
			if !reflect.DeepEqual(original.Object, before.Object) {
				t.Errorf("the original was modified: %s", jsonOf(original))
			}
			if tt.want == "" {
				if !out.Skip || !strings.Contains(out.SkipReason, tt.skipReason) {
					t.Errorf("got skip=%v reason %q, want a skip naming %q", out.Skip, out.SkipReason, tt.skipReason)
				}
				return
			}
			if out.Skip {
				t.Fatalf("skipped: %s", out.SkipReason)
			}
			assertItem(t, out.Item, tt.want)
		})
	}
}

func actionApplies(a Action, gr schema.GroupResource) bool {
	for _, x := range NewActions(a).For(gr) {
		if x == a {
			return true
		}
	}
	return false
}

func TestPodAction(t *testing.T) {
	const tokenVolume = `{"name":"kube-api-access-x7k2p","projected":{"sources":[{"serviceAccountToken":{"expirationSeconds":3607,"path":"token"}},{"configMap":{"name":"kube-root-ca.crt"}}]}}`
	const tokenMount = `{"name":"kube-api-access-x7k2p","mountPath":"/var/run/secrets/kubernetes.io/serviceaccount","readOnly":true}`
	runActionCases(t, podAction{}, podsGR, []actionCase{
		{
			name: "the node, the priority and the class's preemption policy go",
			obj:  `{"kind":"Pod","metadata":{"name":"p"},"spec":{"nodeName":"n1","priority":1000,"priorityClassName":"high","preemptionPolicy":"PreemptLowerPriority","nodeSelector":{"disk":"ssd"},"containers":[{"name":"c","image":"i"}]}}`,
			want: `{"kind":"Pod","metadata":{"name":"p"},"spec":{"priorityClassName":"high","nodeSelector":{"disk":"ssd"},"containers":[{"name":"c","image":"i"}]}}`,
		},
		{
			name: "a preemption policy without a class is the pod's own",
			obj:  `{"kind":"Pod","metadata":{"name":"p"},"spec":{"priority":0,"preemptionPolicy":"Never","containers":[]}}`,
			want: `{"kind":"Pod","metadata":{"name":"p"},"spec":{"preemptionPolicy":"Never","containers":[]}}`,
		},
		{
			name: "ephemeral containers go",
			obj:  `{"kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"c"}],"ephemeralContainers":[{"name":"debugger"}]}}`,
			want: `{"kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"c"}]}}`,
		},
		{
			name: "the projected token volume and its mounts go",
			obj: `{"kind":"Pod","metadata":{"name":"p"},"spec":{"serviceAccountName":"app","volumes":[{"name":"data","persistentVolumeClaim":{"claimName":"d"}},` + tokenVolume + `],
				"initContainers":[{"name":"i","volumeMounts":[` + tokenMount + `]}],
				"containers":[{"name":"c","volumeMounts":[{"name":"data","mountPath":"/data"},` + tokenMount + `]},{"name":"sidecar"}]}}`,
			want: `{"kind":"Pod","metadata":{"name":"p"},"spec":{"serviceAccountName":"app","volumes":[{"name":"data","persistentVolumeClaim":{"claimName":"d"}}],
				"initContainers":[{"name":"i","volumeMounts":[]}],
				"containers":[{"name":"c","volumeMounts":[{"name":"data","mountPath":"/data"}]},{"name":"sidecar"}]}}`,
		},
		{
			name: "a legacy token secret volume of the pod's service account goes",
			obj: `{"kind":"Pod","metadata":{"name":"p"},"spec":{"serviceAccountName":"app","volumes":[{"name":"app-token-abcde","secret":{"secretName":"app-token-abcde"}},{"name":"other-token-x","secret":{"secretName":"other-token-x"}}],
				"containers":[{"name":"c","volumeMounts":[{"name":"app-token-abcde","mountPath":"/t"},{"name":"other-token-x","mountPath":"/o"}]}]}}`,
			want: `{"kind":"Pod","metadata":{"name":"p"},"spec":{"serviceAccountName":"app","volumes":[{"name":"other-token-x","secret":{"secretName":"other-token-x"}}],
				"containers":[{"name":"c","volumeMounts":[{"name":"other-token-x","mountPath":"/o"}]}]}}`,
		},
		{
			name: "the default service account's legacy token",
			obj:  `{"kind":"Pod","metadata":{"name":"p"},"spec":{"volumes":[{"name":"default-token-abcde","secret":{"secretName":"default-token-abcde"}}],"containers":[]}}`,
			want: `{"kind":"Pod","metadata":{"name":"p"},"spec":{"volumes":[],"containers":[]}}`,
		},
		{
			name: "a volume named like the token volume that is not a token stays",
			obj:  `{"kind":"Pod","metadata":{"name":"p"},"spec":{"volumes":[{"name":"kube-api-access-mine","configMap":{"name":"c"}}],"containers":[{"name":"c","volumeMounts":[{"name":"kube-api-access-mine","mountPath":"/c"}]}]}}`,
			want: `{"kind":"Pod","metadata":{"name":"p"},"spec":{"volumes":[{"name":"kube-api-access-mine","configMap":{"name":"c"}}],"containers":[{"name":"c","volumeMounts":[{"name":"kube-api-access-mine","mountPath":"/c"}]}]}}`,
		},
		// Malformed pods.
		{
			name: "a spec that is a string",
			obj:  `{"kind":"Pod","metadata":{"name":"p"},"spec":"nodeName"}`,
			want: `{"kind":"Pod","metadata":{"name":"p"},"spec":"nodeName"}`,
		},
		{
			name: "volumes that are not a list",
			obj:  `{"kind":"Pod","metadata":{"name":"p"},"spec":{"nodeName":"n","volumes":{"kube-api-access-x":{}}}}`,
			want: `{"kind":"Pod","metadata":{"name":"p"},"spec":{"volumes":{"kube-api-access-x":{}}}}`,
		},
		{
			name: "odd volumes, containers and mounts",
			obj: `{"kind":"Pod","metadata":{"name":"p"},"spec":{"serviceAccountName":7,"volumes":["x",7,{"name":3},{"name":"kube-api-access-a","projected":"x"},` + tokenVolume + `],
				"containers":["c",{"name":"a","volumeMounts":"kube-api-access-x7k2p"},{"name":"b","volumeMounts":[1,` + tokenMount + `]}],"initContainers":{"x":1}}}`,
			want: `{"kind":"Pod","metadata":{"name":"p"},"spec":{"serviceAccountName":7,"volumes":["x",7,{"name":3},{"name":"kube-api-access-a","projected":"x"}],
				"containers":["c",{"name":"a","volumeMounts":"kube-api-access-x7k2p"},{"name":"b","volumeMounts":[1]}],"initContainers":{"x":1}}}`,
		},
		{
			name: "no spec",
			obj:  `{"kind":"Pod","metadata":{"name":"p"}}`,
			want: `{"kind":"Pod","metadata":{"name":"p"}}`,
		},
	})
}

func TestServiceAction(t *testing.T) {
	preserve := Options{PreserveNodePorts: true}
	runActionCases(t, serviceAction{}, servicesGR, []actionCase{
		{
			name: "a ClusterIP service gets a new address",
			obj:  `{"kind":"Service","metadata":{"name":"s"},"spec":{"type":"ClusterIP","clusterIP":"10.0.0.7","clusterIPs":["10.0.0.7"],"ipFamilies":["IPv4"],"ports":[{"port":80,"protocol":"TCP","targetPort":8080}]}}`,
			want: `{"kind":"Service","metadata":{"name":"s"},"spec":{"type":"ClusterIP","ipFamilies":["IPv4"],"ports":[{"port":80,"protocol":"TCP","targetPort":8080}]}}`,
		},
		{
			name: "a headless service stays headless",
			obj:  `{"kind":"Service","metadata":{"name":"s"},"spec":{"clusterIP":"None","clusterIPs":["None"],"ports":[{"port":80}]}}`,
			want: `{"kind":"Service","metadata":{"name":"s"},"spec":{"clusterIP":"None","clusterIPs":["None"],"ports":[{"port":80}]}}`,
		},
		{
			name: "headless by clusterIPs alone",
			obj:  `{"kind":"Service","metadata":{"name":"s"},"spec":{"clusterIPs":["None"]}}`,
			want: `{"kind":"Service","metadata":{"name":"s"},"spec":{"clusterIPs":["None"]}}`,
		},
		{
			name: "a NodePort service gets new node ports",
			obj:  `{"kind":"Service","metadata":{"name":"s"},"spec":{"type":"NodePort","clusterIP":"10.0.0.7","ports":[{"name":"http","port":80,"nodePort":30080},{"name":"https","port":443,"nodePort":30443}]}}`,
			want: `{"kind":"Service","metadata":{"name":"s"},"spec":{"type":"NodePort","ports":[{"name":"http","port":80},{"name":"https","port":443}]}}`,
		},
		{
			name: "preserveNodePorts keeps them",
			obj:  `{"kind":"Service","metadata":{"name":"s"},"spec":{"type":"NodePort","clusterIP":"10.0.0.7","ports":[{"name":"http","port":80,"nodePort":30080}]}}`,
			opts: preserve,
			want: `{"kind":"Service","metadata":{"name":"s"},"spec":{"type":"NodePort","ports":[{"name":"http","port":80,"nodePort":30080}]}}`,
		},
		{
			name: "a LoadBalancer's health check node port goes",
			obj:  `{"kind":"Service","metadata":{"name":"s"},"spec":{"type":"LoadBalancer","externalTrafficPolicy":"Local","healthCheckNodePort":31000,"loadBalancerIP":"1.2.3.4","ports":[{"port":80,"nodePort":30080}]}}`,
			want: `{"kind":"Service","metadata":{"name":"s"},"spec":{"type":"LoadBalancer","externalTrafficPolicy":"Local","loadBalancerIP":"1.2.3.4","ports":[{"port":80}]}}`,
		},
		{
			name: "preserveNodePorts keeps the health check node port",
			obj:  `{"kind":"Service","metadata":{"name":"s"},"spec":{"type":"LoadBalancer","externalTrafficPolicy":"Local","healthCheckNodePort":31000,"ports":[{"port":80,"nodePort":30080}]}}`,
			opts: preserve,
			want: `{"kind":"Service","metadata":{"name":"s"},"spec":{"type":"LoadBalancer","externalTrafficPolicy":"Local","healthCheckNodePort":31000,"ports":[{"port":80,"nodePort":30080}]}}`,
		},
		{
			name: "an ExternalName service is left as it is",
			obj:  `{"kind":"Service","metadata":{"name":"s"},"spec":{"type":"ExternalName","externalName":"db.example.com","ports":[{"port":5432}]}}`,
			want: `{"kind":"Service","metadata":{"name":"s"},"spec":{"type":"ExternalName","externalName":"db.example.com","ports":[{"port":5432}]}}`,
		},
		// Malformed services.
		{
			name: "ports that are not a list",
			obj:  `{"kind":"Service","metadata":{"name":"s"},"spec":{"clusterIP":"10.0.0.7","ports":{"nodePort":30080}}}`,
			want: `{"kind":"Service","metadata":{"name":"s"},"spec":{"ports":{"nodePort":30080}}}`,
		},
		{
			name: "ports that are not objects",
			obj:  `{"kind":"Service","metadata":{"name":"s"},"spec":{"ports":[80,"x",null,{"port":80,"nodePort":"30080"}]}}`,
			want: `{"kind":"Service","metadata":{"name":"s"},"spec":{"ports":[80,"x",null,{"port":80}]}}`,
		},
		{
			name: "a clusterIP and type that are numbers",
			obj:  `{"kind":"Service","metadata":{"name":"s"},"spec":{"type":1,"clusterIP":2,"clusterIPs":[3]}}`,
			want: `{"kind":"Service","metadata":{"name":"s"},"spec":{"type":1}}`,
		},
		{
			name: "a spec that is a string",
			obj:  `{"kind":"Service","metadata":{"name":"s"},"spec":"ClusterIP"}`,
			want: `{"kind":"Service","metadata":{"name":"s"},"spec":"ClusterIP"}`,
		},
	})
}

func TestPVCAction(t *testing.T) {
	restored := Facts{PVRestored: func(name string) bool { return name == "pv-kept" }}
	const bound = `{"kind":"PersistentVolumeClaim","metadata":{"name":"c","annotations":{"pv.kubernetes.io/bind-completed":"yes","pv.kubernetes.io/bound-by-controller":"yes",
		"volume.kubernetes.io/selected-node":"n1","volume.kubernetes.io/storage-provisioner":"csi.example.com","volume.beta.kubernetes.io/storage-provisioner":"csi.example.com","app":"db"}},
		"spec":{"storageClassName":"fast","volumeName":"%s","resources":{"requests":{"storage":"1Gi"}}}}`
	runActionCases(t, pvcAction{}, pvcsGR, []actionCase{
		{
			name:  "a claim whose volume is restored binds to it again",
			obj:   strings.Replace(bound, "%s", "pv-kept", 1),
			facts: restored,
			want: `{"kind":"PersistentVolumeClaim","metadata":{"name":"c","annotations":{"volume.kubernetes.io/storage-provisioner":"csi.example.com","volume.beta.kubernetes.io/storage-provisioner":"csi.example.com","app":"db"}},
				"spec":{"storageClassName":"fast","volumeName":"pv-kept","resources":{"requests":{"storage":"1Gi"}}}}`,
		},
		{
			name:  "a claim whose volume is not restored gets a new one",
			obj:   strings.Replace(bound, "%s", "pv-gone", 1),
			facts: restored,
			want: `{"kind":"PersistentVolumeClaim","metadata":{"name":"c","annotations":{"app":"db"}},
				"spec":{"storageClassName":"fast","resources":{"requests":{"storage":"1Gi"}}}}`,
		},
		{
			name: "no facts: no volume is restored",
			obj:  strings.Replace(bound, "%s", "pv-kept", 1),
			want: `{"kind":"PersistentVolumeClaim","metadata":{"name":"c","annotations":{"app":"db"}},
				"spec":{"storageClassName":"fast","resources":{"requests":{"storage":"1Gi"}}}}`,
		},
		{
			name:  "a pending claim",
			obj:   `{"kind":"PersistentVolumeClaim","metadata":{"name":"c"},"spec":{"storageClassName":"fast"}}`,
			facts: restored,
			want:  `{"kind":"PersistentVolumeClaim","metadata":{"name":"c"},"spec":{"storageClassName":"fast"}}`,
		},
		// Malformed claims.
		{
			name:  "a volumeName that is a number",
			obj:   `{"kind":"PersistentVolumeClaim","metadata":{"name":"c"},"spec":{"volumeName":5}}`,
			facts: Facts{PVRestored: func(string) bool { return true }},
			want:  `{"kind":"PersistentVolumeClaim","metadata":{"name":"c"},"spec":{}}`,
		},
		{
			name: "annotations that are a string, spec that is a list",
			obj:  `{"kind":"PersistentVolumeClaim","metadata":{"name":"c","annotations":"pv.kubernetes.io/bind-completed"},"spec":["volumeName"]}`,
			want: `{"kind":"PersistentVolumeClaim","metadata":{"name":"c","annotations":"pv.kubernetes.io/bind-completed"},"spec":["volumeName"]}`,
		},
	})
}

func TestPVAction(t *testing.T) {
	opts := Options{RestorePVs: true, NamespaceMapping: map[string]string{"old": "new"}}
	const pv = `{"kind":"PersistentVolume","metadata":{"name":"pv","annotations":{"pv.kubernetes.io/bind-completed":"yes","pv.kubernetes.io/bound-by-controller":"yes","pv.kubernetes.io/provisioned-by":"csi.example.com"}},
		"spec":{"persistentVolumeReclaimPolicy":"%s","claimRef":{"kind":"PersistentVolumeClaim","namespace":"old","name":"data","uid":"u","resourceVersion":"9"},"csi":{"driver":"csi.example.com","volumeHandle":"h"}}}`
	retain := strings.Replace(pv, "%s", "Retain", 1)
	runActionCases(t, pvAction{}, pvsGR, []actionCase{
		{
			name: "a Retain volume is restored for its mapped claim",
			obj:  retain,
			opts: opts,
			want: `{"kind":"PersistentVolume","metadata":{"name":"pv","annotations":{"pv.kubernetes.io/provisioned-by":"csi.example.com"}},
				"spec":{"persistentVolumeReclaimPolicy":"Retain","claimRef":{"kind":"PersistentVolumeClaim","namespace":"new","name":"data"},"csi":{"driver":"csi.example.com","volumeHandle":"h"}}}`,
		},
		{
			name: "a Retain volume of an unmapped namespace",
			obj:  retain,
			opts: Options{RestorePVs: true},
			want: `{"kind":"PersistentVolume","metadata":{"name":"pv","annotations":{"pv.kubernetes.io/provisioned-by":"csi.example.com"}},
				"spec":{"persistentVolumeReclaimPolicy":"Retain","claimRef":{"kind":"PersistentVolumeClaim","namespace":"old","name":"data"},"csi":{"driver":"csi.example.com","volumeHandle":"h"}}}`,
		},
		{
			name: "a volume whose claim is restored from its CSI snapshot",
			obj:  retain,
			opts: opts,
			facts: Facts{SnapshotOf: func(ns, claim string) (*unstructured.Unstructured, *unstructured.Unstructured) {
				if ns == "old" && claim == "data" { // the claim as backed up, not mapped
					return &unstructured.Unstructured{}, &unstructured.Unstructured{}
				}
				return nil, nil
			}},
			skipReason: "restored from its CSI snapshot",
		},
		{
			name:  "a snapshot of another claim changes nothing",
			obj:   retain,
			opts:  Options{RestorePVs: true},
			facts: Facts{SnapshotOf: func(string, string) (*unstructured.Unstructured, *unstructured.Unstructured) { return nil, nil }},
			want: `{"kind":"PersistentVolume","metadata":{"name":"pv","annotations":{"pv.kubernetes.io/provisioned-by":"csi.example.com"}},
				"spec":{"persistentVolumeReclaimPolicy":"Retain","claimRef":{"kind":"PersistentVolumeClaim","namespace":"old","name":"data"},"csi":{"driver":"csi.example.com","volumeHandle":"h"}}}`,
		},
		{
			name: "an unclaimed Retain volume",
			obj:  `{"kind":"PersistentVolume","metadata":{"name":"pv"},"spec":{"persistentVolumeReclaimPolicy":"Retain"}}`,
			opts: opts,
			want: `{"kind":"PersistentVolume","metadata":{"name":"pv"},"spec":{"persistentVolumeReclaimPolicy":"Retain"}}`,
		},
		{name: "restorePVs false", obj: retain, opts: Options{}, skipReason: "restorePVs is false"},
		{name: "a Delete volume", obj: strings.Replace(pv, "%s", "Delete", 1), opts: opts, skipReason: "persistentVolumeReclaimPolicy is Delete, not Retain"},
		{name: "a Recycle volume", obj: strings.Replace(pv, "%s", "Recycle", 1), opts: opts, skipReason: "is Recycle"},
		{name: "no reclaim policy", obj: `{"kind":"PersistentVolume","metadata":{"name":"pv"},"spec":{}}`, opts: opts, skipReason: "is unset"},
		// Malformed volumes.
		{name: "a reclaim policy that is a number", obj: `{"kind":"PersistentVolume","metadata":{"name":"pv"},"spec":{"persistentVolumeReclaimPolicy":1}}`, opts: opts, skipReason: "not Retain"},
		{name: "a spec that is a string", obj: `{"kind":"PersistentVolume","metadata":{"name":"pv"},"spec":"Retain"}`, opts: opts, skipReason: "not Retain"},
		{
			name: "a claimRef that is a string",
			obj:  `{"kind":"PersistentVolume","metadata":{"name":"pv"},"spec":{"persistentVolumeReclaimPolicy":"Retain","claimRef":"old/data"}}`,
			opts: opts,
			want: `{"kind":"PersistentVolume","metadata":{"name":"pv"},"spec":{"persistentVolumeReclaimPolicy":"Retain","claimRef":"old/data"}}`,
		},
		{
			name: "a claimRef namespace that is a number",
			obj:  `{"kind":"PersistentVolume","metadata":{"name":"pv"},"spec":{"persistentVolumeReclaimPolicy":"Retain","claimRef":{"namespace":1,"uid":"u"}}}`,
			opts: opts,
			want: `{"kind":"PersistentVolume","metadata":{"name":"pv"},"spec":{"persistentVolumeReclaimPolicy":"Retain","claimRef":{"namespace":1}}}`,
		},
	})
}

func TestJobAction(t *testing.T) {
	runActionCases(t, jobAction{}, jobsGR, []actionCase{
		{
			name: "a generated selector goes, with the uid labels of the template",
			obj: `{"kind":"Job","metadata":{"name":"j"},"spec":{"selector":{"matchLabels":{"batch.kubernetes.io/controller-uid":"u"}},
				"template":{"metadata":{"labels":{"batch.kubernetes.io/controller-uid":"u","controller-uid":"u","batch.kubernetes.io/job-name":"j","job-name":"j","app":"x"}},"spec":{"restartPolicy":"Never"}}}}`,
			want: `{"kind":"Job","metadata":{"name":"j"},"spec":{
				"template":{"metadata":{"labels":{"batch.kubernetes.io/job-name":"j","job-name":"j","app":"x"}},"spec":{"restartPolicy":"Never"}}}}`,
		},
		{
			name: "an old generated selector with both uid labels",
			obj:  `{"kind":"Job","metadata":{"name":"j"},"spec":{"manualSelector":false,"selector":{"matchLabels":{"batch.kubernetes.io/controller-uid":"u","controller-uid":"u"}},"template":{"metadata":{"labels":{"controller-uid":"u"}}}}}`,
			want: `{"kind":"Job","metadata":{"name":"j"},"spec":{"manualSelector":false,"template":{"metadata":{"labels":{}}}}}`,
		},
		{
			name: "a manual selector keeps all but the uid entries",
			obj: `{"kind":"Job","metadata":{"name":"j"},"spec":{"manualSelector":true,"selector":{"matchLabels":{"app":"x","controller-uid":"u"},"matchExpressions":[{"key":"tier","operator":"Exists"}]},
				"template":{"metadata":{"labels":{"app":"x","tier":"a","controller-uid":"u"}}}}}`,
			want: `{"kind":"Job","metadata":{"name":"j"},"spec":{"manualSelector":true,"selector":{"matchLabels":{"app":"x"},"matchExpressions":[{"key":"tier","operator":"Exists"}]},
				"template":{"metadata":{"labels":{"app":"x","tier":"a"}}}}}`,
		},
		// Malformed jobs.
		{
			name: "a spec that is a string",
			obj:  `{"kind":"Job","metadata":{"name":"j"},"spec":"selector"}`,
			want: `{"kind":"Job","metadata":{"name":"j"},"spec":"selector"}`,
		},
		{
			name: "a manual selector whose matchLabels are a list, template labels a string",
			obj:  `{"kind":"Job","metadata":{"name":"j"},"spec":{"manualSelector":true,"selector":{"matchLabels":["controller-uid"]},"template":{"metadata":{"labels":"controller-uid=u"}}}}`,
			want: `{"kind":"Job","metadata":{"name":"j"},"spec":{"manualSelector":true,"selector":{"matchLabels":["controller-uid"]},"template":{"metadata":{"labels":"controller-uid=u"}}}}`,
		},
		{
			name: "manualSelector that is a string is not true",
			obj:  `{"kind":"Job","metadata":{"name":"j"},"spec":{"manualSelector":"true","selector":{"matchLabels":{"controller-uid":"u"}}}}`,
			want: `{"kind":"Job","metadata":{"name":"j"},"spec":{"manualSelector":"true"}}`,
		},
	})
}

func TestBindingSubjectsAction(t *testing.T) {
	opts := Options{NamespaceMapping: map[string]string{"old": "new"}}
	const binding = `{"kind":"%s","metadata":{"name":"b"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"view"},
		"subjects":[{"kind":"ServiceAccount","name":"app","namespace":"old"},{"kind":"ServiceAccount","name":"other","namespace":"elsewhere"},
		{"kind":"User","apiGroup":"rbac.authorization.k8s.io","name":"old"},{"kind":"Group","apiGroup":"rbac.authorization.k8s.io","name":"system:serviceaccounts:old"}]}`
	const mapped = `{"kind":"%s","metadata":{"name":"b"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"view"},
		"subjects":[{"kind":"ServiceAccount","name":"app","namespace":"new"},{"kind":"ServiceAccount","name":"other","namespace":"elsewhere"},
		{"kind":"User","apiGroup":"rbac.authorization.k8s.io","name":"old"},{"kind":"Group","apiGroup":"rbac.authorization.k8s.io","name":"system:serviceaccounts:old"}]}`
	for _, kind := range []struct {
		kind string
		gr   schema.GroupResource
	}{{"RoleBinding", roleBindingsGR}, {"ClusterRoleBinding", clusterRoleBindingsGR}} {
		t.Run(kind.kind, func(t *testing.T) {
			runActionCases(t, bindingSubjectsAction{}, kind.gr, []actionCase{
				{name: "service accounts of a mapped namespace", obj: strings.Replace(binding, "%s", kind.kind, 1), opts: opts, want: strings.Replace(mapped, "%s", kind.kind, 1)},
				{name: "no mapping", obj: strings.Replace(binding, "%s", kind.kind, 1), want: strings.Replace(binding, "%s", kind.kind, 1)},
				{
					name: "odd subjects",
					obj:  `{"kind":"RoleBinding","metadata":{"name":"b"},"subjects":["x",{"kind":"ServiceAccount","namespace":3},{"kind":1,"namespace":"old"},{"kind":"ServiceAccount","name":"a","namespace":"old"}]}`,
					opts: opts,
					want: `{"kind":"RoleBinding","metadata":{"name":"b"},"subjects":["x",{"kind":"ServiceAccount","namespace":3},{"kind":1,"namespace":"old"},{"kind":"ServiceAccount","name":"a","namespace":"new"}]}`,
				},
				{
					name: "subjects that are an object",
					obj:  `{"kind":"RoleBinding","metadata":{"name":"b"},"subjects":{"kind":"ServiceAccount","namespace":"old"}}`,
					opts: opts,
					want: `{"kind":"RoleBinding","metadata":{"name":"b"},"subjects":{"kind":"ServiceAccount","namespace":"old"}}`,
				},
			})
		})
	}
}

// recordingAction is an extra action that applies to the resources it is given.
type recordingAction struct {
	SyncAction
	name      string
	resources []schema.GroupResource
}

func (a recordingAction) Name() string                      { return a.name }
func (a recordingAction) AppliesTo() []schema.GroupResource { return a.resources }
func (a recordingAction) Execute(_ context.Context, in ActionInput) (ActionOutput, error) {
	return ActionOutput{Item: in.Item}, nil
}

func TestActionsFor(t *testing.T) {
	everything := recordingAction{name: "everything"}
	pods := recordingAction{name: "pods", resources: []schema.GroupResource{podsGR}}
	actions := NewActions(everything, pods)
	tests := []struct {
		gr   schema.GroupResource
		want []string
	}{
		{gr: podsGR, want: []string{"cairn.dev/pod", "everything", "pods"}},
		{gr: servicesGR, want: []string{"cairn.dev/service", "everything"}},
		{gr: pvcsGR, want: []string{"cairn.dev/persistentvolumeclaim", "everything"}},
		{gr: pvsGR, want: []string{"cairn.dev/persistentvolume", "everything"}},
		{gr: jobsGR, want: []string{"cairn.dev/job", "everything"}},
		{gr: roleBindingsGR, want: []string{"cairn.dev/binding-subjects", "everything"}},
		{gr: clusterRoleBindingsGR, want: []string{"cairn.dev/binding-subjects", "everything"}},
		{gr: schema.GroupResource{Resource: "configmaps"}, want: []string{"everything"}},
		{gr: schema.GroupResource{Group: "example.com", Resource: "jobs"}, want: []string{"everything"}},
	}
	for _, tt := range tests {
		var got []string
		for _, a := range actions.For(tt.gr) {
			got = append(got, a.Name())
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("For(%s) = %v, want %v", tt.gr, got, tt.want)
		}
	}
	if got := NewActions().For(schema.GroupResource{Resource: "configmaps"}); len(got) != 0 {
		t.Errorf("built-in actions for configmaps: %v", got)
	}
}

func TestMergeServiceAccount(t *testing.T) {
	const fresh = `{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"default","namespace":"app","uid":"u","resourceVersion":"3"}}`
	tests := []struct {
		name     string
		existing string
		desired  string
		want     string // the merged object; "" means existing unchanged
	}{
		{
			name:     "the default service account gets the backed-up pull secrets and labels",
			existing: fresh,
			desired: `{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"default","namespace":"app","labels":{"team":"a","cairn.dev/restore-name":"r1"},"annotations":{"note":"x"}},
				"imagePullSecrets":[{"name":"registry"}],"secrets":[{"name":"extra"}],"automountServiceAccountToken":false}`,
			want: `{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"default","namespace":"app","uid":"u","resourceVersion":"3","labels":{"team":"a","cairn.dev/restore-name":"r1"},"annotations":{"note":"x"}},
				"imagePullSecrets":[{"name":"registry"}],"secrets":[{"name":"extra"}],"automountServiceAccountToken":false}`,
		},
		{
			name:     "nothing to add",
			existing: `{"kind":"ServiceAccount","metadata":{"name":"default","labels":{"team":"a","cairn.dev/restore-name":"r1"}},"imagePullSecrets":[{"name":"registry"}],"automountServiceAccountToken":true}`,
			desired:  `{"kind":"ServiceAccount","metadata":{"name":"default","labels":{"team":"a","cairn.dev/restore-name":"r1"}},"imagePullSecrets":[{"name":"registry"}],"automountServiceAccountToken":false}`,
		},
		{
			name:     "a union without duplicates; existing values win, but for the cairn labels",
			existing: `{"kind":"ServiceAccount","metadata":{"name":"sa","labels":{"team":"b","cairn.dev/restore-name":"r0"},"annotations":{"note":"mine"}},"secrets":[{"name":"s1"}],"imagePullSecrets":[{"name":"p1"}]}`,
			desired: `{"kind":"ServiceAccount","metadata":{"name":"sa","labels":{"team":"a","cairn.dev/restore-name":"r1","cairn.dev/backup-name":"b1"},"annotations":{"note":"theirs","other":"y"}},
				"secrets":[{"name":"s1"},{"name":"s2"},{"name":"s2"}],"imagePullSecrets":[{"name":"p2"},{"name":"p1"}]}`,
			want: `{"kind":"ServiceAccount","metadata":{"name":"sa","labels":{"team":"b","cairn.dev/restore-name":"r1","cairn.dev/backup-name":"b1"},"annotations":{"note":"mine","other":"y"}},
				"secrets":[{"name":"s1"},{"name":"s2"}],"imagePullSecrets":[{"name":"p1"},{"name":"p2"}]}`,
		},
		{
			name:     "only the cairn labels differ",
			existing: `{"kind":"ServiceAccount","metadata":{"name":"sa","labels":{"cairn.dev/restore-name":"r0"}}}`,
			desired:  `{"kind":"ServiceAccount","metadata":{"name":"sa","labels":{"cairn.dev/restore-name":"r1"}}}`,
			want:     `{"kind":"ServiceAccount","metadata":{"name":"sa","labels":{"cairn.dev/restore-name":"r1"}}}`,
		},
		// Malformed backed-up service accounts.
		{
			name:     "odd secrets, labels and automount",
			existing: fresh,
			desired: `{"kind":"ServiceAccount","metadata":{"name":"default","labels":{"n":1,"ok":"yes"},"annotations":"x"},
				"secrets":["s",{"name":3},{"name":""},{"name":"good"}],"imagePullSecrets":{"name":"p"},"automountServiceAccountToken":"false"}`,
			want: `{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"default","namespace":"app","uid":"u","resourceVersion":"3","labels":{"ok":"yes"}},"secrets":[{"name":"good"}]}`,
		},
		{
			name:     "metadata that is a string",
			existing: fresh,
			desired:  `{"kind":"ServiceAccount","metadata":"default"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			existing, desired := item(t, tt.existing), item(t, tt.desired)
			existingBefore, desiredBefore := existing.DeepCopy(), desired.DeepCopy()
			merged, changed := MergeServiceAccount(existing, desired)
			if !reflect.DeepEqual(existing.Object, existingBefore.Object) || !reflect.DeepEqual(desired.Object, desiredBefore.Object) {
				t.Error("MergeServiceAccount modified its input")
			}
			want := tt.want
			if want == "" {
				want = tt.existing
			}
			if changed != (tt.want != "") {
				t.Errorf("changed = %v", changed)
			}
			assertItem(t, merged, want)
		})
	}
	if merged, changed := MergeServiceAccount(nil, item(t, fresh)); merged != nil || changed {
		t.Error("merging into nothing")
	}
	if merged, changed := MergeServiceAccount(item(t, fresh), nil); changed || merged == nil {
		t.Error("merging nothing")
	}
}
