// helmrender renders a Helm chart the way `helm template` does, for tests on machines with no
// helm binary: Go's text/template with sprig (the engine and function library Helm uses), plus
// Helm's own functions (toYaml, fromYaml, toJson, include, tpl, required, fail, lookup) and the
// .Values / .Release / .Chart / .Capabilities / .Template objects.
//
// Build offline in GOPATH mode (Debian packages golang-go, golang-github-masterminds-sprig-dev,
// golang-k8s-sigs-yaml-dev):
//
//	GO111MODULE=off GOPATH=/usr/share/gocode go build -o helmrender deploy/helmrender/main.go
//
// Usage:
//
//	helmrender [-name R] [-namespace N] [-kube-version 1.31.0] [-notes] CHART_DIR [VALUES.yaml ...]
//
// Values files are merged over the chart's values.yaml in order (maps merge key by key, a null
// removes a key, anything else replaces). Output: every rendered manifest as a YAML document
// headed "# Source: CHART/templates/FILE", like helm template; with -notes, NOTES.txt only.
// With -values, the merged values as JSON (what Helm validates against values.schema.json).
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	"sigs.k8s.io/yaml"
)

type values = map[string]interface{}

func readYAML(path string) (values, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := values{}
	if err := yaml.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if out == nil {
		out = values{}
	}
	return out, nil
}

// coalesce merges src over dst like Helm: nested maps merge, null deletes, the rest replaces.
func coalesce(dst, src values) values {
	for key, value := range src {
		if value == nil {
			delete(dst, key)
			continue
		}
		srcMap, srcIsMap := value.(map[string]interface{})
		dstMap, dstIsMap := dst[key].(map[string]interface{})
		if srcIsMap && dstIsMap {
			dst[key] = coalesce(dstMap, srcMap)
		} else {
			dst[key] = value
		}
	}
	return dst
}

func toYAML(v interface{}) string {
	data, err := yaml.Marshal(v)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(data), "\n")
}

func fromYAML(str string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := yaml.Unmarshal([]byte(str), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func toJSON(v interface{}) string {
	data, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(data)
}

// chartMeta turns Chart.yaml keys into the capitalised fields templates use (.Chart.Name ...).
func chartMeta(raw values) values {
	out := values{}
	for key, value := range raw {
		if key == "" {
			continue
		}
		out[strings.ToUpper(key[:1])+key[1:]] = value
	}
	return out
}

type capabilities struct {
	KubeVersion kubeVersion
	APIVersions apiVersions
	HelmVersion values
}

type kubeVersion struct {
	Version    string
	Major      string
	Minor      string
	GitVersion string
}

func (k kubeVersion) String() string { return k.Version }

type apiVersions []string

// Has reports whether an API version ("policy/v1") or "group/version/Kind" is available.
func (a apiVersions) Has(version string) bool {
	for _, v := range a {
		if v == version {
			return true
		}
	}
	return false
}

var builtinAPIs = apiVersions{
	"v1", "apps/v1", "batch/v1", "policy/v1", "autoscaling/v2", "autoscaling/v1",
	"networking.k8s.io/v1", "rbac.authorization.k8s.io/v1",
}

func main() {
	name := flag.String("name", "lookaround", "release name")
	namespace := flag.String("namespace", "default", "release namespace")
	kube := flag.String("kube-version", "1.31.0", "Kubernetes version for .Capabilities")
	apis := flag.String("api-versions", "", "extra API versions, comma separated (e.g. monitoring.coreos.com/v1)")
	notes := flag.Bool("notes", false, "render NOTES.txt only")
	showValues := flag.Bool("values", false, "print the merged values as JSON and exit")
	flag.Parse()
	if flag.NArg() < 1 {
		fmt.Fprintln(os.Stderr, "usage: helmrender [flags] CHART_DIR [VALUES.yaml ...]")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), flag.Args()[1:], *name, *namespace, *kube, *apis, *notes, *showValues); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

func run(chartDir string, valueFiles []string, name, namespace, kube, apis string, notes, showValues bool) error {
	chartRaw, err := readYAML(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		return err
	}
	vals, err := readYAML(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		return err
	}
	for _, f := range valueFiles {
		overlay, err := readYAML(f)
		if err != nil {
			return err
		}
		vals = coalesce(vals, overlay)
	}
	if showValues {
		data, err := json.MarshalIndent(vals, "", "  ")
		if err != nil {
			return err
		}
		fmt.Println(string(data))
		return nil
	}
	chart := chartMeta(chartRaw)
	chartName, _ := chart["Name"].(string)

	parts := strings.SplitN(strings.TrimPrefix(kube, "v"), ".", 3)
	if len(parts) < 2 {
		return fmt.Errorf("bad -kube-version %q", kube)
	}
	api := append(apiVersions{}, builtinAPIs...)
	for _, a := range strings.Split(apis, ",") {
		if a = strings.TrimSpace(a); a != "" {
			api = append(api, a)
		}
	}
	top := map[string]interface{}{
		"Values": vals,
		"Chart":  chart,
		"Release": map[string]interface{}{
			"Name": name, "Namespace": namespace, "Service": "Helm",
			"IsInstall": true, "IsUpgrade": false, "Revision": 1,
		},
		"Capabilities": capabilities{
			KubeVersion: kubeVersion{Version: "v" + strings.TrimPrefix(kube, "v"), Major: parts[0], Minor: parts[1], GitVersion: "v" + strings.TrimPrefix(kube, "v")},
			APIVersions: api,
			HelmVersion: values{"Version": "v3.16.0"},
		},
		"Files": map[string]interface{}{},
	}

	// Every file under templates/, named like Helm names them: CHART/templates/FILE.
	var files []string
	tplDir := filepath.Join(chartDir, "templates")
	err = filepath.Walk(tplDir, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if !info.IsDir() {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(files)

	root := template.New("gotpl")
	root.Option("missingkey=zero")
	includedNames := map[string]int{}
	funcs := sprig.TxtFuncMap()
	delete(funcs, "env")
	delete(funcs, "expandenv")
	funcs["toYaml"] = toYAML
	funcs["fromYaml"] = fromYAML
	funcs["toJson"] = toJSON
	funcs["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil {
			return v, errors.New(msg)
		}
		if s, ok := v.(string); ok && s == "" {
			return v, errors.New(msg)
		}
		return v, nil
	}
	funcs["fail"] = func(msg string) (string, error) { return "", errors.New(msg) }
	funcs["lookup"] = func(string, string, string, string) (map[string]interface{}, error) {
		return map[string]interface{}{}, nil
	}
	funcs["include"] = func(name string, data interface{}) (string, error) {
		var buf strings.Builder
		if includedNames[name] > 1000 {
			return "", fmt.Errorf("rendering template has a nested reference name: %s", name)
		}
		includedNames[name]++
		err := root.ExecuteTemplate(&buf, name, data)
		includedNames[name]--
		return buf.String(), err
	}
	funcs["tpl"] = func(text string, data interface{}) (string, error) {
		t, err := root.Clone()
		if err != nil {
			return "", err
		}
		t, err = t.New("tpl").Parse(text)
		if err != nil {
			return "", err
		}
		var buf strings.Builder
		err = t.Execute(&buf, data)
		return buf.String(), err
	}
	root.Funcs(funcs)

	names := make([]string, 0, len(files))
	for _, path := range files {
		rel, _ := filepath.Rel(chartDir, path)
		tname := chartName + "/" + filepath.ToSlash(rel)
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if _, err := root.New(tname).Parse(string(raw)); err != nil {
			return err
		}
		names = append(names, tname)
	}

	var out bytes.Buffer
	for _, tname := range names {
		base := filepath.Base(tname)
		isNotes := base == "NOTES.txt"
		if strings.HasPrefix(base, "_") || notes != isNotes {
			continue
		}
		if !isNotes && !(strings.HasSuffix(base, ".yaml") || strings.HasSuffix(base, ".yml") || strings.HasSuffix(base, ".tpl")) {
			continue
		}
		data := map[string]interface{}{}
		for k, v := range top {
			data[k] = v
		}
		data["Template"] = map[string]interface{}{"Name": tname, "BasePath": chartName + "/templates"}
		var buf strings.Builder
		if err := root.ExecuteTemplate(&buf, tname, data); err != nil {
			return err
		}
		text := strings.ReplaceAll(buf.String(), "<no value>", "")
		if isNotes {
			out.WriteString(text)
			continue
		}
		if strings.TrimSpace(text) == "" {
			continue
		}
		fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", tname, strings.TrimLeft(text, "\n"))
	}
	_, err = os.Stdout.Write(out.Bytes())
	return err
}
