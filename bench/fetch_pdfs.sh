#!/usr/bin/env bash
# Fetches the real PDFs that bench/extract.py measures: a fixed list of files from Debian
# documentation packages (manuals, papers, standards, reference cards, a few long ones), so that
# every run measures the same kinds of document that nobody here wrote.
#
#     bench/fetch_pdfs.sh [DEST]          # default: bench/data/pdf (keep bench/data/ out of git)
#
# Needs apt-get (with package lists: `apt-get update`) and dpkg-deb. The .deb files are kept in
# DEST/../debs, so a second run downloads nothing. DEST/manifest.jsonl gets one line per PDF:
# file, package, version, path inside the package, bytes, sha256. Debian may move a package to a
# newer version: the manifest says which one a run measured.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
dest=${1:-"$here/data/pdf"}
debs="$(dirname "$dest")/debs"
mkdir -p "$dest" "$debs"

# package<TAB>path inside the package (a .pdf.gz is unpacked to .pdf). Kinds: papers (R package
# vignettes, mostly journal articles), standards (X11 ICCCM/XLFD/..., FHS, Debian Policy), manuals
# short and long (R's reference manual has thousands of pages), reference cards (many columns),
# Doxygen output, a Japanese manual, an image-heavy colour paper.
read -r -d '' files <<'EOF' || true
r-cran-zoo	./usr/lib/R/site-library/zoo/doc/zoo.pdf
r-cran-zoo	./usr/lib/R/site-library/zoo/doc/zoo-design.pdf
r-cran-zoo	./usr/lib/R/site-library/zoo/doc/zoo-quickref.pdf
r-cran-sandwich	./usr/lib/R/site-library/sandwich/doc/sandwich.pdf
r-cran-sandwich	./usr/lib/R/site-library/sandwich/doc/sandwich-CL.pdf
r-cran-lmtest	./usr/lib/R/site-library/lmtest/doc/lmtest-intro.pdf
r-cran-strucchange	./usr/lib/R/site-library/strucchange/doc/strucchange-intro.pdf
r-cran-lme4	./usr/lib/R/site-library/lme4/doc/lmer.pdf
r-cran-lme4	./usr/lib/R/site-library/lme4/doc/Theory.pdf
r-cran-mvtnorm	./usr/lib/R/site-library/mvtnorm/doc/MVT_Rnews.pdf
r-cran-matrix	./usr/lib/R/library/Matrix/doc/Intro2Matrix.pdf
r-cran-matrix	./usr/lib/R/library/Matrix/doc/Design-issues.pdf
r-cran-survival	./usr/lib/R/library/survival/doc/survival.pdf
r-cran-survival	./usr/lib/R/library/survival/doc/compete.pdf
r-cran-survival	./usr/lib/R/library/survival/doc/timedep.pdf
r-cran-survival	./usr/lib/R/library/survival/doc/multi.pdf
r-cran-xts	./usr/lib/R/site-library/xts/doc/xts.pdf
r-cran-car	./usr/lib/R/site-library/car/doc/embedding.pdf
xorg-docs	./usr/share/doc/xorg-docs/icccm/icccm.pdf.gz
xorg-docs	./usr/share/doc/xorg-docs/xlfd/xlfd.pdf.gz
xorg-docs	./usr/share/doc/xorg-docs/ctext/ctext.pdf.gz
xorg-docs	./usr/share/doc/xorg-docs/Xserver/XACE-Spec.pdf.gz
xorg-docs	./usr/share/doc/xorg-docs/fonts/fonts.pdf.gz
debian-policy	./usr/share/doc/debian-policy/fhs/fhs-3.0.pdf.gz
debian-policy	./usr/share/doc/debian-policy/policy.pdf.gz
r-doc-pdf	./usr/share/R/doc/manual/R-intro.pdf
r-doc-pdf	./usr/share/R/doc/manual/R-lang.pdf
r-doc-pdf	./usr/share/R/doc/manual/R-exts.pdf
r-doc-pdf	./usr/share/R/doc/manual/R-admin.pdf
r-doc-pdf	./usr/share/R/doc/manual/fullrefman.pdf
glpk-doc	./usr/share/doc/glpk-doc/glpk.pdf
glpk-doc	./usr/share/doc/glpk-doc/gmpl.pdf
glpk-doc	./usr/share/doc/glpk-doc/gmpl_es.pdf
glpk-doc	./usr/share/doc/glpk-doc/cnfsat.pdf
why3-doc-pdf	./usr/share/doc/why3-doc-pdf/manual.pdf
gnuplot-doc	./usr/share/doc/gnuplot/gnuplot.pdf
octave-doc	./usr/share/doc/octave/octave.pdf
octave-doc	./usr/share/doc/octave/refcard-a4.pdf
python-reportlab-doc	./usr/share/doc/python-reportlab-doc/reportlab-userguide.pdf
developers-reference	./usr/share/developers-reference/developers-reference.pdf
maint-guide	./usr/share/doc/maint-guide/maint-guide.en.pdf
debian-reference-en	./usr/share/debian-reference/debian-reference.en.pdf
debian-faq	./usr/share/doc/debian/FAQ/debian-faq.en.pdf.gz
freefem-doc	./usr/share/doc/freefem-doc/freefem.pdf
camlidl-doc	./usr/share/doc/camlidl/camlidl-1.04.doc.pdf
pari-doc	./usr/share/pari/doc/users.pdf
pari-doc	./usr/share/pari/doc/tutorial.pdf
pari-doc	./usr/share/pari/doc/refcard.pdf
live-manual-pdf	./usr/share/doc/live-manual/pdf/live-manual.portrait.en.a4.pdf.gz
sbcl-doc	./usr/share/doc/sbcl/sbcl.pdf.gz
docbook-xsl-doc-pdf	./usr/share/doc/docbook-xsl-doc-pdf/doc/reference.pdf.gz
siscone-doc-pdf	./usr/share/doc/siscone-doc-pdf/pdf/refman.pdf.gz
gri-pdf-doc	./usr/share/doc/gri/gri.pdf.gz
ghostscript-doc	./usr/share/doc/ghostscript/GS9_Color_Management.pdf
auto-multiple-choice-doc-pdf	./usr/share/doc/auto-multiple-choice/auto-multiple-choice.en.pdf
auto-multiple-choice-doc-pdf	./usr/share/doc/auto-multiple-choice/auto-multiple-choice.ja.pdf
EOF

# The .deb of a package, downloaded once into $debs (apt-get names it package_version_arch.deb).
deb_of() {
    local package=$1 found
    found=$(find "$debs" -maxdepth 1 -name "${package}_*.deb" -print -quit)
    if [[ -z $found ]]; then
        (cd "$debs" && apt-get download -q "$package" >&2)
        found=$(find "$debs" -maxdepth 1 -name "${package}_*.deb" -print -quit)
    fi
    [[ -n $found ]] || { echo "fetch_pdfs: no .deb for $package" >&2; return 1; }
    printf '%s\n' "$found"
}

manifest="$dest/manifest.jsonl"
: >"$manifest.tmp"
count=0
while IFS=$'\t' read -r package path; do
    [[ -n $package ]] || continue
    deb=$(deb_of "$package")
    version=$(dpkg-deb -f "$deb" Version)
    name="${package}__$(basename "$path" .gz)"
    # One member out of the package's data archive; gzip -dc for the .pdf.gz that Debian ships.
    if [[ $path == *.gz ]]; then
        dpkg-deb --fsys-tarfile "$deb" | tar -xOf - "$path" | gzip -dc >"$dest/$name.tmp"
    else
        dpkg-deb --fsys-tarfile "$deb" | tar -xOf - "$path" >"$dest/$name.tmp"
    fi
    head -c 5 "$dest/$name.tmp" | grep -q '^%PDF-' || { echo "fetch_pdfs: $name is not a PDF" >&2; exit 1; }
    mv "$dest/$name.tmp" "$dest/$name"
    bytes=$(stat -c %s "$dest/$name")
    sha=$(sha256sum "$dest/$name" | cut -d' ' -f1)
    printf '{"file": "%s", "package": "%s", "version": "%s", "path": "%s", "bytes": %d, "sha256": "%s"}\n' \
        "$name" "$package" "$version" "${path#.}" "$bytes" "$sha" >>"$manifest.tmp"
    count=$((count + 1))
done <<<"$files"
mv "$manifest.tmp" "$manifest"
echo "fetch_pdfs: $count PDFs in $dest (manifest: $manifest)"
