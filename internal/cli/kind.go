package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// kind is what the commands every kind has alike (get, describe, logs, delete, cancel, and
// the completion of names) need to know of one kind of object: T is the object
// (cairnv1.Backup), L its list (cairnv1.BackupList). Each kind's file declares its kind once
// and hands it to the functions below, so that the file says only what differs.
type kind[T, L any] struct {
	// name is the kind as messages say it: "backup", "storage location".
	name string
	// plural is the kind as help says it of more than one: "backups".
	plural string
	// items is where a list holds its objects.
	items func(*L) *[]T
	// columns are the CLI's own columns of the table `get` prints, beside the server's
	// printer columns.
	columns []column[T]
	// inOperatorNamespace says the objects are in Cairn's namespace unless -n names
	// another (storage locations, env.locationNamespace), not in -n's or the context's.
	inOperatorNamespace bool
	// selectable gives `get` a -l flag to list only the objects whose labels match.
	selectable bool
}

// object is a pointer to an object of a kind; objectList a pointer to its list.
type object[T any] interface {
	*T
	client.Object
}

type objectList[L any] interface {
	*L
	client.ObjectList
}

// namespace is where the commands find objects of kind k.
func (k kind[T, L]) namespace(e *env) (string, error) {
	if k.inOperatorNamespace {
		return e.locationNamespace(), nil
	}
	return e.namespace()
}

// namespaceAndClient is where the commands find objects of kind k, and the API client.
func (k kind[T, L]) namespaceAndClient(e *env) (string, client.WithWatch, error) {
	ns, err := k.namespace(e)
	if err != nil {
		return "", nil, err
	}
	c, err := e.client()
	return ns, c, err
}

// newGetCommand is `get [NAME...]` of kind k: the named objects in that order, or all of
// the namespace's (those matching -l, for a selectable kind), as a table, JSON or YAML. The
// table is the API server's (its printer columns) with the kind's own columns. As kubectl
// does, JSON and YAML are the object itself when exactly one NAME is given, and the list (Kind
// BackupList, ...) otherwise: for several names, or for all of them however many there are
// (none or one included).
func newGetCommand[T, L any, P object[T], LP objectList[L]](e *env, k kind[T, L]) *cobra.Command {
	var selector string
	cmd := &cobra.Command{
		Use:   "get [NAME...]",
		Short: "List " + k.plural,
		RunE: func(_ *cobra.Command, names []string) error {
			ns, c, err := k.namespaceAndClient(e)
			if err != nil {
				return err
			}
			var sel labels.Selector
			if selector != "" {
				parsed, err := metav1.ParseToLabelSelector(selector)
				if err != nil {
					return usageErrorf("invalid --selector: %v", err)
				}
				if sel, err = metav1.LabelSelectorAsSelector(parsed); err != nil {
					return usageErrorf("invalid --selector: %v", err)
				}
			}
			if e.output == "json" || e.output == "yaml" {
				return printObjects[T, L, P, LP](e, k, c, ns, names, sel)
			}
			return printObjectTable[T, L, P](e, k, ns, names, sel)
		},
	}
	if k.selectable {
		cmd.Flags().StringVarP(&selector, "selector", "l", "", "Only "+k.plural+" whose labels match this selector.")
	}
	return withOutput(e, cmd)
}

// printObjects prints the objects of kind k called names, or all of namespace ns's that match
// sel (nil for all), as JSON or YAML: one object for one name, else a list.
func printObjects[T, L any, P object[T], LP objectList[L]](e *env, k kind[T, L], c client.Client, ns string, names []string, sel labels.Selector) error {
	list := LP(new(L))
	if len(names) == 0 {
		opts := []client.ListOption{client.InNamespace(ns)}
		if sel != nil {
			opts = append(opts, client.MatchingLabelsSelector{Selector: sel})
		}
		if err := c.List(context.Background(), list, opts...); err != nil {
			return err
		}
	}
	items := k.items((*L)(list))
	for _, name := range names {
		obj := P(new(T))
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
			return notFound(err, k.name, name, ns)
		}
		if len(names) == 1 {
			return e.printStructured(obj)
		}
		*items = append(*items, *obj)
	}
	return e.printStructured(list)
}

// printObjectTable prints the objects of kind k called names, or all of namespace ns's that
// match sel (nil for all), as the API server's table with k's own columns; -o wide adds the
// server's columns of priority above 0.
func printObjectTable[T, L any, P object[T]](e *env, k kind[T, L], ns string, names []string, sel labels.Selector) error {
	gvk, err := apiutil.GVKForObject(P(new(T)), Scheme())
	if err != nil {
		return err
	}
	get, err := e.serverTables(gvk)
	if err != nil {
		return err
	}
	var t *metav1.Table
	if len(names) == 0 {
		selector := ""
		if sel != nil {
			selector = sel.String()
		}
		if t, err = get(context.Background(), ns, "", selector); err != nil {
			return err
		}
	}
	for _, name := range names {
		one, err := get(context.Background(), ns, name, "")
		if err != nil {
			return notFound(err, k.name, name, ns)
		}
		if t == nil {
			t = one
			continue
		}
		t.Rows = append(t.Rows, one.Rows...)
	}
	if len(t.Rows) == 0 {
		e.errorf("No resources found in %s namespace.\n", ns)
		return nil
	}
	objs, err := rowObjects[T](t)
	if err != nil {
		return err
	}
	return printTable(e.streams.Out, withColumns(t, objs, k.columns, e.clock.Now()), e.output == "wide")
}

// newNamedCommand is `VERB NAME` of kind k: it reads the object called NAME, saying so when
// there is none, and runs run on it. Every command that takes one NAME reads its object this
// one way, so they fail alike.
func newNamedCommand[T, L any, P object[T]](e *env, k kind[T, L], verb, short string, run func(obj P) error) *cobra.Command {
	return &cobra.Command{
		Use:   verb + " NAME",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			obj, err := getNamed[T, L, P](e, k, args[0])
			if err != nil {
				return err
			}
			return run(obj)
		},
	}
}

// newDescribeCommand is `describe NAME` of kind k: the object as JSON or YAML with -o, else
// what describe prints of it.
func newDescribeCommand[T, L any, P object[T]](e *env, k kind[T, L], short string, describe func(obj P) error) *cobra.Command {
	return withOutput(e, newNamedCommand(e, k, "describe", short, func(obj P) error {
		if e.output == "json" || e.output == "yaml" {
			return e.printStructured(obj)
		}
		return describe(obj)
	}))
}

// getNamed reads the object of kind k called name, saying so (with the kind, as the user
// would name it) when there is none.
func getNamed[T, L any, P object[T]](e *env, k kind[T, L], name string) (P, error) {
	ns, c, err := k.namespaceAndClient(e)
	if err != nil {
		return nil, err
	}
	obj := P(new(T))
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
		return nil, notFound(err, k.name, name, ns)
	}
	return obj, nil
}

// newDeleteCommand is `delete NAME...` of kind k: it asks "Delete KIND(s) NAMES in namespace
// NS<also>?" unless --confirm, deletes each object, and calls deleted after each so the kind
// can say what its deletion means (and wait for it). Every delete command asks, deletes and
// fails alike.
func newDeleteCommand[T, L any, P object[T]](e *env, k kind[T, L], short, also string, deleted func(obj P) error) *cobra.Command {
	var confirmed bool
	cmd := &cobra.Command{
		Use:   "delete NAME...",
		Short: short,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(_ *cobra.Command, names []string) error {
			ns, err := k.namespace(e)
			if err != nil {
				return err
			}
			if !confirmed {
				ok, err := e.confirm(fmt.Sprintf("Delete %s(s) %s in namespace %s%s?", k.name, strings.Join(names, ", "), ns, also))
				if err != nil || !ok {
					return err
				}
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			for _, name := range names {
				obj := P(new(T))
				obj.SetNamespace(ns)
				obj.SetName(name)
				if err := c.Delete(context.Background(), obj); err != nil {
					return notFound(err, k.name, name, ns)
				}
				if err := deleted(obj); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&confirmed, "confirm", false, "Delete without asking.")
	return cmd
}

// phaseEnd is what newCancelCommand needs of a kind's phase: whether it has ended.
type phaseEnd interface {
	IsTerminal() bool
}

// newCancelCommand is `cancel NAME...` of kind k (backups and restores): it cancels each
// object, telling whether it is being cancelled or had already ended; phase reads the
// patched object's phase.
func newCancelCommand[T, L any, P object[T]](e *env, k kind[T, L], short string, phase func(P) phaseEnd) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel NAME...",
		Short: short,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(_ *cobra.Command, names []string) error {
			ns, c, err := k.namespaceAndClient(e)
			if err != nil {
				return err
			}
			title := strings.ToUpper(k.name[:1]) + k.name[1:]
			for _, name := range names {
				obj := P(new(T))
				obj.SetNamespace(ns)
				obj.SetName(name)
				if err := c.Patch(context.Background(), obj, cancelPatch); err != nil {
					return notFound(err, k.name, name, ns)
				}
				if p := phase(obj); p.IsTerminal() {
					e.printf("%s %s already ended %s: nothing to cancel.\n", title, name, p)
					continue
				}
				e.printf("%s %s is being cancelled.\n", title, name)
			}
			return nil
		},
	}
}

// completeNames completes the names of the objects of kind k, for shell completion of NAME
// arguments and of flags that name an object.
func completeNames[T, L any, LP objectList[L]](e *env, k kind[T, L]) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		ns, c, err := k.namespaceAndClient(e)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		list := LP(new(L))
		if err := c.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []string
		_ = meta.EachListItem(list, func(o runtime.Object) error {
			if m, err := meta.Accessor(o); err == nil && strings.HasPrefix(m.GetName(), toComplete) {
				for _, a := range args {
					if a == m.GetName() {
						return nil
					}
				}
				names = append(names, m.GetName())
			}
			return nil
		})
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

// withNameCompletion completes the NAME arguments of the commands under parent that take
// them, names of kind k.
func withNameCompletion[T, L any, LP objectList[L]](e *env, parent *cobra.Command, k kind[T, L]) *cobra.Command {
	for _, cmd := range parent.Commands() {
		if cmd.Name() != "create" {
			cmd.ValidArgsFunction = completeNames[T, L, LP](e, k)
		}
	}
	return parent
}
