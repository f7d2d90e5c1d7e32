package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/liggitt/tabwriter"
	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// customColumnsPrefix starts -o custom-columns=HEADER:PATH,...
const customColumnsPrefix = "custom-columns="

// outputFlags are kubectl get's output flags: -o (a command's own view by
// default; wide; custom-columns=; and cli-runtime's json, yaml, name and
// templates), and for tables --no-headers, --show-labels and -L.
type outputFlags struct {
	print        *genericclioptions.PrintFlags
	table        bool // the default view is a table, which wide widens
	noHeaders    bool
	showLabels   bool
	labelColumns []string
}

// bindOutputFlags binds the output flags to cmd; table says whether its
// default view is a table.
func bindOutputFlags(cmd *cobra.Command, table bool) *outputFlags {
	o := &outputFlags{print: genericclioptions.NewPrintFlags("").WithTypeSetter(scheme), table: table}
	fs := cmd.Flags()
	fs.StringVarP(o.print.OutputFormat, "output", "o", "", fmt.Sprintf("Output format. One of: (%s). Default: %s.", strings.Join(o.formats(), ", "), o.defaultView()))
	o.print.OutputFlagSpecified = func() bool { return fs.Changed("output") }
	o.print.JSONYamlPrintFlags.AddFlags(cmd)
	o.print.TemplatePrinterFlags.AddFlags(cmd)
	if table {
		fs.BoolVar(&o.noHeaders, "no-headers", false, "Print the table without its header row (also for custom-columns).")
		fs.BoolVar(&o.showLabels, "show-labels", false, "Add a LABELS column with all labels to the table.")
		fs.StringSliceVarP(&o.labelColumns, "label-columns", "L", nil, "Add a column per label key, e.g. -L env,tier.")
	}
	completeWith(cmd, "output", func() []string { return o.formats() })
	return o
}

func (o *outputFlags) defaultView() string {
	if o.table {
		return "a table"
	}
	return "a summary"
}

// formats are the values -o takes.
func (o *outputFlags) formats() []string {
	formats := o.print.AllowedFormats()
	if o.table {
		formats = append(formats, "wide")
	}
	return append(formats, customColumnsPrefix)
}

// resourcePrinter prints objects as -o asks: in the command's own view,
// as rows of a table, or as the objects themselves.
type resourcePrinter struct {
	// view is true for the command's own view (-o not given).
	view bool
	// rows prints tables: set for the default and wide tables and
	// custom columns.
	rows printers.ResourcePrinter
	// custom is set for custom columns, which print objects, not rows.
	custom bool
	// objects prints the objects: JSON, YAML, name or a template.
	objects printers.ResourcePrinter
}

// toPrinter returns the printer the flags ask for; withNamespace adds a
// NAMESPACE column to tables.
func (o *outputFlags) toPrinter(withNamespace bool) (*resourcePrinter, error) {
	format := *o.print.OutputFormat
	options := printers.PrintOptions{
		NoHeaders: o.noHeaders, WithNamespace: withNamespace, Wide: format == "wide",
		ShowLabels: o.showLabels, ColumnLabels: o.labelColumns,
	}
	switch {
	case format == "" && o.print.TemplatePrinterFlags.TemplateArgument != nil && *o.print.TemplatePrinterFlags.TemplateArgument != "":
		// --template alone means go-template, as in kubectl
	case format == "" && o.table, format == "wide" && o.table:
		return &resourcePrinter{view: true, rows: printers.NewTablePrinter(options)}, nil
	case format == "":
		return &resourcePrinter{view: true}, nil
	case strings.HasPrefix(format, customColumnsPrefix):
		p, err := newCustomColumnsPrinter(strings.TrimPrefix(format, customColumnsPrefix), o.noHeaders)
		if err != nil {
			return nil, usageErrorf("--output %s: %v", format, err)
		}
		return &resourcePrinter{rows: p, custom: true}, nil
	}
	p, err := o.print.ToPrinter()
	if genericclioptions.IsNoCompatiblePrinterError(err) {
		return nil, usageErrorf("--output must be one of %s, not %q", strings.Join(o.formats(), ", "), format)
	}
	if err != nil {
		return nil, usageErrorf("--output %s: %v", format, err)
	}
	return &resourcePrinter{objects: p}, nil
}

// printObjects prints objs as -o asks, other than as a table: one object
// alone if single, else a v1 List, as kubectl does.
func (p *resourcePrinter) printObjects(w io.Writer, objs []client.Object, single bool) error {
	var items []unstructured.Unstructured
	for _, obj := range objs {
		u, err := toUnstructured(obj)
		if err != nil {
			return err
		}
		items = append(items, *u)
	}
	printer := p.objects
	if p.custom {
		printer = p.rows
	}
	if single && len(items) == 1 {
		return printer.PrintObj(&items[0], w)
	}
	list := &unstructured.UnstructuredList{
		Object: map[string]any{"apiVersion": "v1", "kind": "List", "metadata": map[string]any{"resourceVersion": ""}},
		Items:  items,
	}
	return printer.PrintObj(list, w)
}

// toUnstructured returns obj as an unstructured object, with its
// apiVersion and kind.
func toUnstructured(obj client.Object) (*unstructured.Unstructured, error) {
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if err != nil {
		return nil, err
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

// customColumnsPrinter prints -o custom-columns=HEADER:PATH,...: a column
// per JSONPath, as kubectl does.
type customColumnsPrinter struct {
	headers []string
	paths   []*jsonpath.JSONPath
	// noHeaders is set by --no-headers, and once the header is printed.
	noHeaders bool
}

func newCustomColumnsPrinter(spec string, noHeaders bool) (*customColumnsPrinter, error) {
	p := &customColumnsPrinter{noHeaders: noHeaders}
	for column := range strings.SplitSeq(spec, ",") {
		header, path, ok := strings.Cut(column, ":")
		if !ok || header == "" || path == "" {
			return nil, fmt.Errorf("%q is not HEADER:JSONPATH", column)
		}
		if !strings.HasPrefix(path, "{") {
			path = "{." + strings.TrimPrefix(path, ".") + "}"
		}
		jp := jsonpath.New(header).AllowMissingKeys(true)
		if err := jp.Parse(path); err != nil {
			return nil, fmt.Errorf("column %s: %w", header, err)
		}
		p.headers = append(p.headers, header)
		p.paths = append(p.paths, jp)
	}
	return p, nil
}

// PrintObj prints obj, or each item of a list, as a row, aligned with
// earlier rows when w is the tabwriter they went to.
func (p *customColumnsPrinter) PrintObj(obj runtime.Object, w io.Writer) error {
	items := []runtime.Object{obj}
	if list, ok := obj.(*unstructured.UnstructuredList); ok {
		items = nil
		for i := range list.Items {
			items = append(items, &list.Items[i])
		}
	}
	tw, ok := w.(*tabwriter.Writer)
	if !ok {
		tw = printers.GetNewTabWriter(w)
		defer tw.Flush()
	}
	if !p.noHeaders {
		fmt.Fprintln(tw, strings.Join(p.headers, "\t"))
		p.noHeaders = true
	}
	for _, item := range items {
		u, ok := item.(*unstructured.Unstructured)
		if !ok {
			return fmt.Errorf("custom columns cannot print %T", item)
		}
		cells := make([]string, len(p.paths))
		for i, jp := range p.paths {
			results, err := jp.FindResults(u.Object)
			if err != nil {
				return err
			}
			var values []string
			for _, result := range results {
				for _, v := range result {
					values = append(values, fmt.Sprint(v.Interface()))
				}
			}
			cells[i] = orNone(oneLine(strings.Join(values, ",")))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return nil
}

// tableRow is a row of a table for obj, with its cells.
func tableRow(obj runtime.Object, cells ...any) metav1.TableRow {
	return metav1.TableRow{Cells: cells, Object: runtime.RawExtension{Object: obj}}
}

// completeWith completes flag's values with those values returns.
func completeWith(cmd *cobra.Command, flag string, values func() []string) {
	_ = cmd.RegisterFlagCompletionFunc(flag, func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		var matching []string
		for _, v := range values() {
			if strings.HasPrefix(v, toComplete) {
				matching = append(matching, v)
			}
		}
		directive := cobra.ShellCompDirectiveNoFileComp
		if slices.ContainsFunc(matching, func(v string) bool { return strings.HasSuffix(v, "=") }) {
			directive |= cobra.ShellCompDirectiveNoSpace
		}
		return matching, directive
	})
}
