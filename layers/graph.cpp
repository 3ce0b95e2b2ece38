#include "layers/graph.h"

#include <algorithm>
#include <map>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops.h"

namespace qat {

namespace {

const char* op_name(GraphOp op) {
  switch (op) {
    case GraphOp::module: return "module";
    case GraphOp::add: return "add";
    case GraphOp::concat: return "concat";
  }
  return "?";
}

// "a.b.c" -> {"a", "b", "c"}; an empty part is refused.
std::vector<std::string> path_parts(const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    parts.push_back(path.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    QAT_CHECK(!parts.back().empty(), "graph: node name '", path, "' has an empty part");
    if (dot == std::string::npos) return parts;
    start = dot + 1;
  }
}

Module* child_named(const Module& m, const std::string& name) {
  for (const auto& [n, c] : m.children())
    if (n == name) return c.get();
  return nullptr;
}

// " (net.yaml, line 12)" where the node's origin is known.
std::string origin_of(const GraphNode& n) { return n.origin.empty() ? "" : " (" + n.origin + ")"; }

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

Tensor ModuleContainer::forward(const Tensor&) {
  QAT_FAIL("a ModuleContainer holds a graph's modules and computes nothing; run the Graph");
}

Module& Graph::container_for(const std::string& path) {
  const std::vector<std::string> parts = path_parts(path);
  Module* at = this;
  std::string prefix;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    prefix += (i ? "." : "") + parts[i];
    Module* next = child_named(*at, parts[i]);
    if (!next) {
      auto c = std::make_shared<ModuleContainer>();
      if (at == this) register_module(parts[i], c);
      else static_cast<ModuleContainer*>(at)->add(parts[i], c);
      next = c.get();
    }
    QAT_CHECK(dynamic_cast<ModuleContainer*>(next) != nullptr, "graph: node '", path, "' lies under '", prefix,
              "', which is a node's module (", next->type_name(), "), not a container");
    at = next;
  }
  return *at;
}

Module* Graph::module_at(const std::string& path) const {
  const Module* at = this;
  for (const std::string& part : path_parts(path)) {
    at = child_named(*at, part);
    if (!at) return nullptr;
  }
  return const_cast<Module*>(at);
}

std::string Graph::add(const std::string& name, ModulePtr m, const std::string& input) {
  QAT_CHECK(m != nullptr, "graph: node '", name, "' has no module");
  QAT_CHECK(name != kInput, "graph: '", kInput, "' names the network's input, not a node");
  for (const GraphNode& n : nodes_) QAT_CHECK(n.name != name, "graph: node '", name, "' is defined twice");
  Module& parent = container_for(name);
  const std::string leaf = path_parts(name).back();
  QAT_CHECK(child_named(parent, leaf) == nullptr, "graph: node '", name,
            "' names a container of other nodes' modules; give it another name");
  if (&parent == this) register_module(leaf, std::move(m));
  else static_cast<ModuleContainer&>(parent).add(leaf, std::move(m));
  nodes_.push_back({name, GraphOp::module, {input}, {}});
  return name;
}

std::string Graph::add_op(const std::string& name, GraphOp op, std::vector<std::string> inputs) {
  QAT_CHECK(op != GraphOp::module, "graph: node '", name, "': a module node is added with add()");
  QAT_CHECK(name != kInput, "graph: '", kInput, "' names the network's input, not a node");
  for (const GraphNode& n : nodes_) QAT_CHECK(n.name != name, "graph: node '", name, "' is defined twice");
  QAT_CHECK(op == GraphOp::add ? inputs.size() == 2 : inputs.size() >= 2, "graph: node '", name, "' (",
            op_name(op), ") takes ", op == GraphOp::add ? "two inputs" : "two or more inputs", ", got ",
            inputs.size(), " (", join(inputs), ")");
  nodes_.push_back({name, op, std::move(inputs), {}});
  return name;
}

void Graph::set_output(const std::string& name) { output_ = name; }

void Graph::set_add_eval(const std::string& node, AddEval eval) {
  const auto it = std::find_if(nodes_.begin(), nodes_.end(), [&](const GraphNode& n) { return n.name == node; });
  QAT_CHECK(it != nodes_.end() && it->op == GraphOp::add, "graph: '", node, "' is not an add node");
  add_eval_[node] = std::move(eval);
}

std::vector<std::string> Graph::order() const {
  std::vector<std::string> names;
  for (const size_t i : topological_order(node_index())) names.push_back(nodes_[i].name);
  return names;
}

std::vector<std::string> Graph::readers(const std::string& name) const {
  std::vector<std::string> out;
  for (const GraphNode& n : nodes_)
    if (std::find(n.inputs.begin(), n.inputs.end(), name) != n.inputs.end()) out.push_back(n.name);
  return out;
}

const GraphNode& Graph::node(const std::string& name) const {
  for (const GraphNode& n : nodes_)
    if (n.name == name) return n;
  QAT_FAIL("graph: no node '", name, "'");
}

Module* Graph::module(const std::string& name) const {
  for (const GraphNode& n : nodes_)
    if (n.name == name) return n.op == GraphOp::module ? module_at(name) : nullptr;
  return nullptr;
}

ModulePtr Graph::shared_module(const std::string& name) const {
  Module* m = module(name);
  if (!m) return nullptr;
  const std::vector<std::string> parts = path_parts(name);
  const Module* parent = this;
  for (size_t i = 0; i + 1 < parts.size(); ++i) parent = child_named(*parent, parts[i]);
  for (const auto& [n, c] : parent->children())
    if (c.get() == m) return c;
  return nullptr;
}

void Graph::replace_module(const std::string& name, ModulePtr m) {
  QAT_CHECK(module(name) != nullptr, "graph: no module node '", name, "' to replace");
  const std::vector<std::string> parts = path_parts(name);
  Module& parent = container_for(name);
  parent.replace_child(parts.back(), std::move(m));
}

std::string Graph::insert_after(std::string after, std::string name, ModulePtr m) {
  QAT_CHECK(node_index().count(after), "graph: no node '", after, "' to insert '", name, "' after");
  const std::vector<std::string> old_readers = readers(after);
  add(name, std::move(m), after);
  for (GraphNode& n : nodes_)
    if (std::find(old_readers.begin(), old_readers.end(), n.name) != old_readers.end())
      std::replace(n.inputs.begin(), n.inputs.end(), after, name);
  if (output_ == after) output_ = name;
  return name;
}

void Graph::set_origin(const std::string& name, std::string origin) {
  for (GraphNode& n : nodes_)
    if (n.name == name) {
      n.origin = std::move(origin);
      return;
    }
  QAT_FAIL("graph: no node '", name, "' to give an origin");
}

std::map<std::string, size_t> Graph::node_index() const {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < nodes_.size(); ++i) index[nodes_[i].name] = i;
  return index;
}

std::vector<size_t> Graph::topological_order(const std::map<std::string, size_t>& index) const {
  for (const GraphNode& n : nodes_)
    for (const std::string& in : n.inputs)
      QAT_CHECK(in == kInput || index.count(in), "graph: node '", n.name, "'", origin_of(n), " reads '", in,
                "', which is neither a node nor '", kInput, "'");
  QAT_CHECK(!output_.empty(), "graph: no output node (set_output)");
  QAT_CHECK(index.count(output_), "graph: the output '", output_, "' is not a node");
  // Depth-first from each node in definition order: states 0 new, 1 on the path, 2 done.
  std::vector<int> state(nodes_.size(), 0);
  std::vector<size_t> order, path;
  auto visit = [&](auto&& self, size_t i) -> void {
    if (state[i] == 2) return;
    if (state[i] == 1) {
      std::string cycle;
      const auto from = std::find(path.begin(), path.end(), i);
      for (auto it = from; it != path.end(); ++it) cycle += nodes_[*it].name + " -> ";
      QAT_FAIL("graph: a cycle: ", cycle, nodes_[i].name);
    }
    state[i] = 1;
    path.push_back(i);
    for (const std::string& in : nodes_[i].inputs)
      if (in != kInput) self(self, index.at(in));
    path.pop_back();
    state[i] = 2;
    order.push_back(i);
  };
  for (size_t i = 0; i < nodes_.size(); ++i) visit(visit, i);
  return order;
}

void Graph::check() const {
  for (const GraphNode& n : nodes_)
    if (n.op == GraphOp::module)
      QAT_CHECK(module_at(n.name) != nullptr, "graph: node '", n.name, "' has lost its module");
  (void)topological_order(node_index());
}

Tensor Graph::forward(const Tensor& x) { return evaluate(x, false)[node_index().at(output_)]; }

std::map<std::string, Tensor> Graph::node_values(const Tensor& x) {
  const std::vector<Tensor> value = evaluate(x, true);
  std::map<std::string, Tensor> out;
  for (size_t i = 0; i < nodes_.size(); ++i) out[nodes_[i].name] = value[i];
  return out;
}

std::vector<Tensor> Graph::evaluate(const Tensor& x, bool keep_all) {
  const std::map<std::string, size_t> index = node_index();
  const std::vector<size_t> order = topological_order(index);
  // Readers left per node: a value is dropped after its last reader.
  std::vector<int> readers(nodes_.size(), 0);
  for (const GraphNode& n : nodes_)
    for (const std::string& in : n.inputs)
      if (in != kInput) ++readers[index.at(in)];
  std::vector<Tensor> value(nodes_.size());
  auto take = [&](const std::string& in) {
    if (in == kInput) return x;
    const size_t i = index.at(in);
    Tensor v = value[i];
    if (--readers[i] == 0 && nodes_[i].name != output_ && !keep_all) value[i] = Tensor();
    return v;
  };
  for (const size_t i : order) {
    const GraphNode& n = nodes_[i];
    std::vector<Tensor> in;
    for (const std::string& name : n.inputs) in.push_back(take(name));
    switch (n.op) {
      case GraphOp::module: {
        Module* m = module_at(n.name);
        QAT_CHECK(m != nullptr, "graph: node '", n.name, "' has lost its module");
        try {
          value[i] = m->forward(in[0]);
        } catch (const Error& e) {
          QAT_FAIL("graph node '", n.name, "'", origin_of(n), ": ", e.what());
        }
        break;
      }
      case GraphOp::add:
        QAT_CHECK(in[0].sizes() == in[1].sizes(), "graph: node '", n.name, "'", origin_of(n), " adds ", n.inputs[0], " ",
                  in[0].sizes(), " and ", n.inputs[1], " ", in[1].sizes(), ": the shapes differ");
        if (const auto e = add_eval_.find(n.name); e != add_eval_.end() && !is_training() && !grad_enabled())
          if (Tensor v = e->second(in[0], in[1]); v.defined()) {
            value[i] = v;
            break;
          }
        value[i] = qat::add(in[0], in[1]);
        break;
      case GraphOp::concat: {
        for (size_t k = 1; k < in.size(); ++k)
          QAT_CHECK(in[k].dim() == in[0].dim() && in[k].dim() >= 2 && in[k].size(0) == in[0].size(0) &&
                        std::equal(in[k].sizes().begin() + 2, in[k].sizes().end(), in[0].sizes().begin() + 2),
                    "graph: node '", n.name, "'", origin_of(n), " concatenates ", n.inputs[0], " ", in[0].sizes(), " and ",
                    n.inputs[k], " ", in[k].sizes(), " along channels: the other sizes differ");
        value[i] = qat::concat(in, 1);
        break;
      }
    }
  }
  return value;
}

std::string Graph::describe() const {
  return std::to_string(nodes_.size()) + " nodes, output " + output_;
}

}  // namespace qat
