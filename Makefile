# make lint checks what review asks of every change: gofmt, go vet (all three
# modules) and goimports grouping (standard library first, then other
# modules, then this module, each group separated by a blank line).
# make lint-commits BASE=main checks the subjects of the commits after BASE.

GOIMPORTS ?= go run golang.org/x/tools/cmd/goimports@v0.52.0
LOCAL := github.com/slidelimit/slidelimit
MODULES := . contrib bench

.PHONY: lint lint-commits

lint:
	@files=$$(git ls-files '*.go'); \
	out=$$(gofmt -l $$files); \
	if [ -n "$$out" ]; then printf 'gofmt would change:\n%s\n' "$$out"; exit 1; fi; \
	for m in $(MODULES); do (cd $$m && go vet ./...) || exit 1; done; \
	out=$$($(GOIMPORTS) -local $(LOCAL) -l $$files); \
	if [ -n "$$out" ]; then printf 'goimports -local $(LOCAL) would regroup:\n%s\n' "$$out"; exit 1; fi

lint-commits:
	@.ci/commit-subjects "$(BASE)"
