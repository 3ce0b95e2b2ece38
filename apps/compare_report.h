#pragma once
// The parts of `qat compare`'s report beyond the table and the curves: the
// accuracy / weight-size trade-off with its Pareto front, and the one
// self-contained page (index.html, inline SVG, no network) that shows it all.
#include <string>
#include <utility>
#include <vector>

#include "apps/compare.h"

namespace qat::apps {

// Indices of the points (size, accuracy) no other point beats: none has a
// size <= and an accuracy >= with one of them strictly better. Sorted by
// size, then accuracy; of equal points the first. (The charts give sizes as
// the table prints them: what prints alike is equal there.)
std::vector<size_t> pareto_front(const std::vector<std::pair<double, double>>& size_accuracy);

// Best val top-1 against weight storage, one labelled point per run, the
// Pareto front drawn through its points.
std::string tradeoff_chart(const std::vector<RunSummary>& runs);
// The same against inference throughput (runs with infer_img_s only;
// faster and more accurate is better); empty when no run has a figure.
std::string speed_chart(const std::vector<RunSummary>& runs);

// index.html: the Markdown text (tables as HTML tables, their first row the
// header; other lines paragraphs), then the given SVGs (title, svg text) inline.
std::string html_report(const std::string& title, const std::string& markdown_table,
                        const std::vector<std::pair<std::string, std::string>>& svgs);

}  // namespace qat::apps
