//! [`TopologyDescription`]: a topology printed as Kafka Streams prints its own
//! (`InternalTopologyBuilder.TopologyDescription`), so the two can be compared line by line.

use std::cmp::Ordering;
use std::fmt;

use crate::topology::defs::{DefKind, SinkTopic};
use crate::topology::{Node, Topology};

/// A topology's sub-topologies, nodes, stores and topics, as text in Kafka Streams' format:
/// within a sub-topology nodes come largest sub-tree first (then by name), and sets of
/// stores and topics in the order Java's `HashSet` iterates them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologyDescription {
    text: String,
}

impl fmt::Display for TopologyDescription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

pub(crate) fn describe(topology: &Topology) -> TopologyDescription {
    let nodes = &topology.nodes;
    let sizes: Vec<usize> = (0..nodes.len()).map(|n| size(nodes, n)).collect();
    let (successors, predecessors) = linked_as_java(nodes);
    let names = |of: &[usize]| -> String {
        if of.is_empty() {
            return "none".to_owned();
        }
        of.iter()
            .map(|&n| nodes[n].name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut text = String::from("Topologies:\n ");
    let count = nodes.iter().map(|n| n.subtopology + 1).max().unwrap_or(0);
    for id in 0..count {
        let mut members: Vec<usize> = (0..nodes.len())
            .filter(|&n| nodes[n].subtopology == id)
            .collect();
        members.sort_by(|&a, &b| compare(nodes, &sizes, a, b));
        let global = members
            .iter()
            .any(|&n| matches!(nodes[n].kind, DefKind::GlobalSource { .. }));
        text.push_str("  ");
        if global {
            text.push_str(&format!(
                "Sub-topology: {id} for global store (will not generate tasks)\n"
            ));
        } else {
            text.push_str(&format!("Sub-topology: {id}\n"));
        }
        for n in members {
            let node = &nodes[n];
            let (to, from) = (names(&successors[n]), names(&predecessors[n]));
            let line = match &node.kind {
                DefKind::Source { topics, .. } => {
                    let topics: Vec<String> = topics.iter().map(ToString::to_string).collect();
                    format!(
                        "Source: {} (topics: [{}])\n      --> {to}",
                        node.name,
                        java_set(&topics)
                    )
                }
                DefKind::GlobalSource { topic, .. } => {
                    format!("Source: {} (topics: [{topic}])\n      --> {to}", node.name)
                }
                DefKind::Processor { .. } | DefKind::GlobalProcessor { .. } => format!(
                    "Processor: {} (stores: [{}])\n      --> {to}\n      <-- {from}",
                    node.name,
                    java_set(&node.stores)
                ),
                DefKind::Sink { topic, .. } => {
                    let topic = match topic {
                        SinkTopic::Fixed(topic) => format!("topic: {topic}"),
                        SinkTopic::PerRecord => "extractor class: per record".to_owned(),
                    };
                    format!("Sink: {} ({topic})\n      <-- {from}", node.name)
                }
            };
            text.push_str("    ");
            text.push_str(&line);
            text.push('\n');
        }
        if !global {
            text.push('\n');
        }
    }
    TopologyDescription { text }
}

/// Kafka Streams' node order: the larger sub-tree first, then by name.
fn compare(nodes: &[Node], sizes: &[usize], a: usize, b: usize) -> Ordering {
    sizes[b]
        .cmp(&sizes[a])
        .then_with(|| java_compare(&nodes[a].name, &nodes[b].name))
}

/// Each node's successors and predecessors in the order Kafka Streams prints them. It
/// links the nodes of a sub-topology one at a time, in the order of a Java `HashMap` of
/// their names, into `TreeSet`s ordered by sub-tree size while the sizes still grow, so a
/// set's order is the order of the sizes when each member was inserted. Its sets are
/// replayed here as unbalanced search trees, which walk as Java's red-black ones do for the
/// fan-outs of up to three nodes that topologies have in practice.
fn linked_as_java(nodes: &[Node]) -> (Vec<Vec<usize>>, Vec<Vec<usize>>) {
    let mut sizes = vec![1usize; nodes.len()];
    let mut successors: Vec<SearchTree> = vec![SearchTree::default(); nodes.len()];
    let mut predecessors: Vec<SearchTree> = vec![SearchTree::default(); nodes.len()];
    let count = nodes.iter().map(|n| n.subtopology + 1).max().unwrap_or(0);
    for id in 0..count {
        let mut members: Vec<usize> = (0..nodes.len())
            .filter(|&n| nodes[n].subtopology == id)
            .collect();
        let table = java_table(members.len());
        members.sort_by_key(|&n| java_bucket(&nodes[n].name, table));
        for node in members {
            for &parent in &nodes[node].parents {
                predecessors[node].insert(parent, |a, b| compare(nodes, &sizes, a, b));
                successors[parent].insert(node, |a, b| compare(nodes, &sizes, a, b));
                let delta = sizes[node];
                grow(&mut sizes, &predecessors, parent, delta);
            }
        }
    }
    (
        successors.iter().map(SearchTree::in_order).collect(),
        predecessors.iter().map(SearchTree::in_order).collect(),
    )
}

/// Kafka Streams' `updateSize`: `node` and every ancestor linked so far grow by `delta`.
fn grow(sizes: &mut [usize], predecessors: &[SearchTree], node: usize, delta: usize) {
    sizes[node] += delta;
    for parent in predecessors[node].in_order() {
        grow(sizes, predecessors, parent, delta);
    }
}

/// A binary search tree of node indices, compared when inserted.
#[derive(Debug, Clone, Default)]
struct SearchTree {
    /// (node, left, right), the root first.
    entries: Vec<(usize, Option<usize>, Option<usize>)>,
}

impl SearchTree {
    fn insert(&mut self, node: usize, compare: impl Fn(usize, usize) -> Ordering) {
        let new = self.entries.len();
        let mut at = 0;
        while let Some(&(here, left, right)) = self.entries.get(at) {
            let next = match compare(node, here) {
                Ordering::Equal => return,
                Ordering::Less => left,
                Ordering::Greater => right,
            };
            match next {
                Some(next) => at = next,
                None => {
                    if compare(node, here) == Ordering::Less {
                        self.entries[at].1 = Some(new);
                    } else {
                        self.entries[at].2 = Some(new);
                    }
                    break;
                }
            }
        }
        self.entries.push((node, None, None));
    }

    fn in_order(&self) -> Vec<usize> {
        fn walk(tree: &SearchTree, at: Option<usize>, out: &mut Vec<usize>) {
            if let Some(&(node, left, right)) = at.and_then(|at| tree.entries.get(at)) {
                walk(tree, left, out);
                out.push(node);
                walk(tree, right, out);
            }
        }
        let mut out = Vec::new();
        walk(self, (!self.entries.is_empty()).then_some(0), &mut out);
        out
    }
}

/// The size Kafka Streams orders nodes by: the node and, through every path, what it
/// forwards to.
fn size(nodes: &[Node], n: usize) -> usize {
    1 + nodes[n]
        .children
        .iter()
        .map(|&child| size(nodes, child))
        .sum::<usize>()
}

/// Java's `String.compareTo`: by UTF-16 code units.
fn java_compare(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

/// `names` joined in the order a Java `HashSet<String>` holding them iterates: by bucket,
/// then in the order added.
fn java_set(names: &[String]) -> String {
    let table = java_table(names.len());
    let mut ordered: Vec<&String> = names.iter().collect();
    ordered.sort_by_key(|name| java_bucket(name, table));
    ordered
        .iter()
        .map(|name| name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The table size of a Java `HashMap` (or `HashSet`) of `len` entries: 16, doubled while more
/// than three quarters full.
fn java_table(len: usize) -> usize {
    let mut table = 16usize;
    while len * 4 > table * 3 {
        table *= 2;
    }
    table
}

/// The bucket of `name` in a Java hash table of `table` buckets: `String.hashCode()`, spread
/// as `HashMap.hash` spreads it.
fn java_bucket(name: &str, table: usize) -> usize {
    let hash = name.encode_utf16().fold(0u32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(u32::from(unit))
    });
    ((hash ^ (hash >> 16)) as usize) & (table - 1)
}

#[cfg(test)]
mod tests {
    use super::java_set;

    /// Orders Java 17 prints for `new HashSet<>(List.of(...))`.
    #[test]
    fn sets_iterate_as_java_hash_sets() {
        let names = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(java_set(&names(&["b", "a"])), "a, b");
        assert_eq!(
            java_set(&names(&["orders", "customers"])),
            "orders, customers"
        );
        assert_eq!(
            java_set(&names(&["counts", "words-store", "zeta", "alpha"])),
            "zeta, counts, alpha, words-store"
        );
    }
}
