// Command render renders a Helm chart's templates the way `helm template` does, for tests in a
// place with no Helm binary: Go's text/template + sprig (Helm's function library) + the few
// functions Helm adds itself (include, tpl, required, toYaml, fromYaml, toJson, fromJson, lookup).
// Values follow Helm's rules: values.yaml, then each -f file deep-merged over it (maps merge, lists
// and scalars replace, null deletes a key); YAML numbers become float64 as in Helm.
//
// Usage: render -chart DIR [-f values.json]... [-name RELEASE] [-namespace NS] [-kube-version 1.31.0]
// Output (stdout): JSON {"values": merged values, "manifests": {"<chart>/templates/x.yaml": text}}.
// Build offline in GOPATH mode with Debian's golang-1.19-go and golang-github-masterminds-sprig-dev:
//   GO111MODULE=off GOPATH=/usr/share/gocode go build -o render render.go
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

	"github.com/Masterminds/sprig" // v3 (Debian: GOPATH mode resolves its /v3 imports)
	"gopkg.in/yaml.v2"
)

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// yamlToJSONValue parses YAML and returns what Helm's sigs.k8s.io/yaml.Unmarshal would: a
// JSON-compatible tree with float64 numbers and string map keys.
func yamlToJSONValue(data []byte) (interface{}, error) {
	var raw interface{}
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, err
	}
	conv, err := jsonCompatible(raw)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(conv)
	if err != nil {
		return nil, err
	}
	var out interface{}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	return out, nil
}

func jsonCompatible(v interface{}) (interface{}, error) {
	switch t := v.(type) {
	case map[interface{}]interface{}:
		m := map[string]interface{}{}
		for k, val := range t {
			c, err := jsonCompatible(val)
			if err != nil {
				return nil, err
			}
			m[fmt.Sprint(k)] = c
		}
		return m, nil
	case []interface{}:
		l := make([]interface{}, len(t))
		for i, val := range t {
			c, err := jsonCompatible(val)
			if err != nil {
				return nil, err
			}
			l[i] = c
		}
		return l, nil
	default:
		return v, nil
	}
}

// toYAML is Helm's toYaml: sigs.k8s.io/yaml.Marshal (JSON, then JSON->YAML with yaml.v2), trimmed.
func toYAML(v interface{}) string {
	j, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	var ms yaml.MapSlice
	var anyv interface{}
	if len(j) > 0 && j[0] == '{' {
		if err := yaml.Unmarshal(j, &ms); err != nil {
			return ""
		}
		anyv = ms
	} else if err := yaml.Unmarshal(j, &anyv); err != nil {
		return ""
	}
	out, err := yaml.Marshal(anyv)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(out), "\n")
}

func fromYAML(s string) map[string]interface{} {
	v, err := yamlToJSONValue([]byte(s))
	if err != nil {
		return map[string]interface{}{"Error": err.Error()}
	}
	m, _ := v.(map[string]interface{})
	if m == nil {
		m = map[string]interface{}{}
	}
	return m
}

// coalesce merges src over dst as Helm merges a -f file over the chart's values.
func coalesce(dst, src map[string]interface{}) map[string]interface{} {
	for k, sv := range src {
		if sv == nil {
			delete(dst, k)
			continue
		}
		if sm, ok := sv.(map[string]interface{}); ok {
			if dm, ok := dst[k].(map[string]interface{}); ok {
				dst[k] = coalesce(dm, sm)
				continue
			}
		}
		dst[k] = sv
	}
	return dst
}

func readValues(path string) (map[string]interface{}, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	v, err := yamlToJSONValue(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if v == nil {
		return map[string]interface{}{}, nil
	}
	m, ok := v.(map[string]interface{})
	if !ok {
		return nil, fmt.Errorf("%s: values must be a map", path)
	}
	return m, nil
}

type apiVersions []string

func (a apiVersions) Has(v string) bool {
	for _, x := range a {
		if x == v {
			return true
		}
	}
	return false
}

func main() {
	chartDir := flag.String("chart", "", "chart directory")
	name := flag.String("name", "release-name", "release name")
	namespace := flag.String("namespace", "default", "release namespace")
	kubeVersion := flag.String("kube-version", "1.31.0", "Kubernetes version for .Capabilities")
	var valueFiles multiFlag
	flag.Var(&valueFiles, "f", "values file (YAML or JSON), repeatable")
	flag.Parse()
	if err := run(*chartDir, *name, *namespace, *kubeVersion, valueFiles); err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(1)
	}
}

func run(chartDir, name, namespace, kubeVersion string, valueFiles []string) error {
	chartMeta, err := readValues(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		return err
	}
	values, err := readValues(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		return err
	}
	for _, f := range valueFiles {
		user, err := readValues(f)
		if err != nil {
			return err
		}
		values = coalesce(values, user)
	}
	chartName := fmt.Sprint(chartMeta["name"])
	chart := map[string]interface{}{}
	for k, v := range chartMeta { // Helm exposes Chart.yaml fields capitalised
		chart[strings.ToUpper(k[:1])+k[1:]] = v
	}
	parts := strings.SplitN(kubeVersion, ".", 3)
	caps := map[string]interface{}{
		"KubeVersion": map[string]interface{}{
			"Version": "v" + kubeVersion, "GitVersion": "v" + kubeVersion, "Major": parts[0], "Minor": parts[1],
		},
		"APIVersions": apiVersions{"v1", "apps/v1", "admissionregistration.k8s.io/v1", "rbac.authorization.k8s.io/v1", "policy/v1"},
		"HelmVersion": map[string]interface{}{"Version": "v3.16.0"},
	}

	root := template.New("gotpl").Option("missingkey=zero")
	funcs := sprig.TxtFuncMap()
	delete(funcs, "env")
	delete(funcs, "expandenv")
	includedNames := map[string]int{}
	funcs["include"] = func(n string, data interface{}) (string, error) {
		if includedNames[n] > 100 {
			return "", errors.New("rendering template has a nested reference name: " + n)
		}
		includedNames[n]++
		var buf bytes.Buffer
		err := root.ExecuteTemplate(&buf, n, data)
		includedNames[n]--
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
		var buf bytes.Buffer
		err = t.Execute(&buf, data)
		return strings.ReplaceAll(buf.String(), "<no value>", ""), err
	}
	funcs["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil {
			return v, errors.New(msg)
		}
		if s, ok := v.(string); ok && s == "" {
			return v, errors.New(msg)
		}
		return v, nil
	}
	funcs["toYaml"] = toYAML
	funcs["fromYaml"] = fromYAML
	funcs["toJson"] = func(v interface{}) string { b, _ := json.Marshal(v); return string(b) }
	funcs["fromJson"] = func(s string) map[string]interface{} {
		m := map[string]interface{}{}
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			m["Error"] = err.Error()
		}
		return m
	}
	funcs["lookup"] = func(string, string, string, string) (map[string]interface{}, error) {
		return map[string]interface{}{}, nil // as `helm template`: no cluster
	}
	root.Funcs(funcs)

	var files []string
	err = filepath.Walk(filepath.Join(chartDir, "templates"), func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if !info.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(files)
	var names []string
	for _, p := range files {
		rel, _ := filepath.Rel(chartDir, p)
		n := chartName + "/" + filepath.ToSlash(rel)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if _, err := root.New(n).Parse(string(data)); err != nil {
			return err
		}
		names = append(names, n)
	}
	out := map[string]interface{}{"values": values}
	manifests := map[string]string{}
	for _, n := range names {
		base := filepath.Base(n)
		if strings.HasPrefix(base, "_") || strings.HasSuffix(base, ".txt") {
			continue
		}
		data := map[string]interface{}{
			"Values": values,
			"Release": map[string]interface{}{
				"Name": name, "Namespace": namespace, "Service": "Helm", "IsInstall": true, "IsUpgrade": false, "Revision": 1,
			},
			"Chart":        chart,
			"Capabilities": caps,
			"Template":     map[string]interface{}{"Name": n, "BasePath": chartName + "/templates"},
		}
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, n, data); err != nil {
			return err
		}
		manifests[n] = strings.ReplaceAll(buf.String(), "<no value>", "")
	}
	out["manifests"] = manifests
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	return enc.Encode(out)
}
