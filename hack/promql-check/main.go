// promql-check parses Prometheus rule files and Grafana dashboards with Prometheus' own
// parsers (model/rulefmt, promql/parser) and prints, as JSON, every metric name the
// expressions select, so a test can compare them with what the processes export.
//
// Usage: promql-check FILE... (.yaml/.yml: a Prometheus rule file; .json: a Grafana dashboard).
// Exit status 1 and the parser's errors on stderr when anything does not parse.
package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"sort"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// Grafana's interval variables become a fixed range; other $variables only appear inside
// label matcher strings, where any text parses.
var grafanaIntervals = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// A Grafana variable query `label_values(<selector>, <label>)` wraps a PromQL selector.
var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)

type report struct {
	Expressions int      `json:"expressions"`
	Metrics     []string `json:"metrics"`
}

func metricNames(expr parser.Expr, into map[string]bool) {
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok {
			name := vs.Name
			for _, m := range vs.LabelMatchers {
				if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
					name = m.Value
				}
			}
			if name != "" {
				into[name] = true
			}
		}
		return nil
	})
}

// dashboardExprs collects every "expr" under panels and every templating query.
func dashboardExprs(v any, key string, out *[]string) {
	switch t := v.(type) {
	case map[string]any:
		for k, child := range t {
			dashboardExprs(child, k, out)
		}
	case []any:
		for _, child := range t {
			dashboardExprs(child, key, out)
		}
	case string:
		if key == "expr" {
			*out = append(*out, t)
		} else if key == "query" {
			if m := labelValues.FindStringSubmatch(t); m != nil {
				*out = append(*out, m[1])
			}
		}
	}
}

var promql = parser.NewParser(parser.Options{})

func check(path string, names map[string]bool) (int, []string) {
	var exprs []string
	var errs []string
	if strings.HasSuffix(path, ".json") {
		raw, err := os.ReadFile(path)
		if err != nil {
			return 0, []string{err.Error()}
		}
		var doc any
		if err := json.Unmarshal(raw, &doc); err != nil {
			return 0, []string{fmt.Sprintf("%s: %v", path, err)}
		}
		dashboardExprs(doc, "", &exprs)
	} else {
		logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
		groups, perrs := rulefmt.ParseFile(path, false, model.UTF8Validation, promql, logger)
		for _, e := range perrs {
			errs = append(errs, e.Error())
		}
		if groups != nil && len(perrs) == 0 {
			for _, g := range groups.Groups {
				for _, r := range g.Rules {
					exprs = append(exprs, r.Expr)
				}
			}
		}
	}
	for _, text := range exprs {
		expr, err := promql.ParseExpr(grafanaIntervals.Replace(text))
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %q: %v", path, text, err))
			continue
		}
		metricNames(expr, names)
	}
	return len(exprs), errs
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: promql-check FILE...")
		os.Exit(2)
	}
	names := map[string]bool{}
	total := 0
	var errs []string
	for _, path := range os.Args[1:] {
		n, e := check(path, names)
		total += n
		errs = append(errs, e...)
	}
	if len(errs) > 0 {
		for _, e := range errs {
			fmt.Fprintln(os.Stderr, e)
		}
		os.Exit(1)
	}
	out := report{Expressions: total, Metrics: []string{}}
	for n := range names {
		out.Metrics = append(out.Metrics, n)
	}
	sort.Strings(out.Metrics)
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(out)
}
