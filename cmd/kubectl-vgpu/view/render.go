package view

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"sigs.k8s.io/yaml"
)

// Formats of -o.
const (
	FormatTable = ""
	FormatJSON  = "json"
	FormatYAML  = "yaml"
)

// CheckFormat refuses an -o value the view cannot print.
func CheckFormat(f string) error {
	switch f {
	case FormatTable, "table", FormatJSON, FormatYAML:
		return nil
	}
	return fmt.Errorf("-o %q: unknown output format; use json or yaml, or leave -o out for a table", f)
}

type tabular interface {
	table() [][]string
	notes() []string
}

func (PodsReport) notes() []string { return nil }

// Write prints v (NodesReport, PodsReport or WhyReport) in format.
func Write(w io.Writer, v any, format string) error {
	switch format {
	case FormatJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case FormatYAML:
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	switch t := v.(type) {
	case WhyReport:
		_, err := io.WriteString(w, t.text())
		return err
	case tabular:
		tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		rows := t.table()
		if len(rows) == 1 {
			_, err := io.WriteString(w, "No resources found.\n")
			return err
		}
		for _, row := range rows {
			for i, cell := range row {
				if i > 0 {
					fmt.Fprint(tw, "\t")
				}
				fmt.Fprint(tw, cell)
			}
			fmt.Fprintln(tw)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, n := range t.notes() {
			fmt.Fprintln(w, n)
		}
		return nil
	}
	return fmt.Errorf("cannot print %T", v)
}
