package manifests

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
)

// docLink matches a page of the repository named in the chart's NOTES,
// with the anchor of a heading or the heading quoted after a comma:
// README.md#install, README.md, "Install", docs/install.md.
var docLink = regexp.MustCompile(`\b((?:docs/)?[A-Za-z0-9_-]+\.md)(?:#([a-z0-9-]+)|, "([^"]+)")?`)

// TestNotesLinksResolve renders the chart's NOTES, with persistence off
// and on, and checks that every page it names exists, and every anchor
// is a heading of that page.
func TestNotesLinksResolve(t *testing.T) {
	chart, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, values := range []string{"", "persistence: {enabled: true}"} {
		vals, err := chartutil.ReadValues([]byte(values))
		if err != nil {
			t.Fatal(err)
		}
		release := chartutil.ReleaseOptions{Name: releaseName, Namespace: fleetNS, Revision: 1, IsInstall: true}
		renderValues, err := chartutil.ToRenderValues(chart, vals, release, chartutil.DefaultCapabilities)
		if err != nil {
			t.Fatal(err)
		}
		files, err := engine.Render(chart, renderValues)
		if err != nil {
			t.Fatal(err)
		}
		notes := files[releaseName+"/templates/NOTES.txt"]
		links := docLink.FindAllStringSubmatch(notes, -1)
		if len(links) == 0 {
			t.Fatalf("the NOTES name no page:\n%s", notes)
		}
		for _, link := range links {
			page, anchor := link[1], link[2]
			if link[3] != "" {
				anchor = slug(link[3])
			}
			headings := anchors(t, filepath.Join(root, page))
			if anchor != "" && !headings[anchor] {
				t.Errorf("the NOTES link to %s#%s: %s has no such heading", page, anchor, page)
			}
		}
	}
}

// anchors returns the anchors GitHub gives the headings of the markdown
// file path: lower case, spaces as dashes, punctuation dropped.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("a page the NOTES name: %v", err)
	}
	defer f.Close()
	found := map[string]bool{}
	scanner := bufio.NewScanner(f)
	inFence := false
	for scanner.Scan() {
		line := scanner.Text()
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		found[slug(strings.TrimLeft(line, "#"))] = true
	}
	if err := scanner.Err(); err != nil {
		t.Fatal(err)
	}
	return found
}

// punctuation is what GitHub drops from a heading to make its anchor.
var punctuation = regexp.MustCompile(`[^a-z0-9 _-]`)

// slug is the anchor GitHub gives heading.
func slug(heading string) string {
	heading = strings.ToLower(strings.TrimSpace(heading))
	return strings.ReplaceAll(punctuation.ReplaceAllString(heading, ""), " ", "-")
}
