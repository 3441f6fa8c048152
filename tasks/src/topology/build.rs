//! Checking a [`TopologyBuilder`]'s graph and grouping its nodes into sub-topologies.

use std::collections::HashMap;

use crate::config::StoreSpec;
use crate::topology::defs::{DefKind, NodeDef, SinkTopic};
use crate::topology::topic::TopicName;
use crate::topology::{GlobalStore, Node, Subtopology, Topology, TopologyError};

/// What a builder added.
pub(crate) struct Parts {
    pub nodes: Vec<NodeDef>,
    pub stores: Vec<StoreSpec>,
    pub connections: Vec<(String, String)>,
    pub globals: Vec<StoreSpec>,
}

pub(crate) fn build(parts: Parts) -> Result<Topology, TopologyError> {
    let Parts {
        nodes: defs,
        stores,
        connections,
        globals,
    } = parts;
    let index = index_names(&defs)?;
    check_stores(&stores, &globals)?;
    check_topics(&defs)?;
    let parents = resolve_parents(&defs, &index)?;
    check_cycles(&defs, &parents)?;
    let connected = connect_stores(&defs, &index, &stores, &globals, &connections)?;
    if !defs
        .iter()
        .any(|def| matches!(def.kind, DefKind::Source { .. }))
    {
        return Err(TopologyError::NoSource);
    }
    let groups = group(&defs, &parents, &connected);
    let mut children = vec![Vec::new(); defs.len()];
    for (child, of) in parents.iter().enumerate() {
        for &parent in of {
            children[parent].push(child);
        }
    }
    let nodes: Vec<Node> = defs
        .into_iter()
        .zip(parents)
        .zip(children)
        .zip(connected)
        .zip(&groups)
        .map(
            |((((def, parents), children), stores), &subtopology)| Node {
                name: def.name,
                kind: def.kind,
                parents,
                children,
                stores,
                subtopology,
            },
        )
        .collect();
    let (subtopologies, global_stores) = describe_groups(&nodes);
    Ok(Topology {
        nodes,
        subtopologies,
        global_stores,
        stores,
        global_specs: globals,
    })
}

fn index_names(defs: &[NodeDef]) -> Result<HashMap<&str, usize>, TopologyError> {
    let mut index = HashMap::new();
    for (i, def) in defs.iter().enumerate() {
        if index.insert(def.name.as_str(), i).is_some() {
            return Err(TopologyError::DuplicateNode {
                name: def.name.clone(),
            });
        }
    }
    Ok(index)
}

fn check_stores(stores: &[StoreSpec], globals: &[StoreSpec]) -> Result<(), TopologyError> {
    let mut seen = std::collections::HashSet::new();
    for spec in stores.iter().chain(globals) {
        valid_name("store", &spec.name)?;
        if !seen.insert(spec.name.as_str()) {
            return Err(TopologyError::DuplicateStore {
                store: spec.name.clone(),
            });
        }
    }
    Ok(())
}

/// Kafka's legal topic characters: a store's name is part of its changelog topic's.
fn valid_name(what: &'static str, name: &str) -> Result<(), TopologyError> {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || !name.chars().all(legal) {
        return Err(TopologyError::InvalidName {
            what,
            name: name.to_owned(),
        });
    }
    Ok(())
}

fn check_topics(defs: &[NodeDef]) -> Result<(), TopologyError> {
    let mut readers: HashMap<TopicName, &str> = HashMap::new();
    for def in defs {
        let topics: Vec<TopicName> = match &def.kind {
            DefKind::Source { topics, .. } => topics.clone(),
            DefKind::GlobalSource { topic, .. } => vec![TopicName::from(topic.as_str())],
            DefKind::Sink {
                topic: SinkTopic::Fixed(TopicName::Repartition(name)),
                ..
            } => {
                valid_name("repartition topic", name)?;
                continue;
            }
            _ => continue,
        };
        if topics.is_empty() {
            return Err(TopologyError::NoTopic {
                node: def.name.clone(),
            });
        }
        for topic in topics {
            if let TopicName::Repartition(name) = &topic {
                valid_name("repartition topic", name)?;
            }
            let topic_name = topic.to_string();
            if let Some(first) = readers.insert(topic, &def.name) {
                return Err(TopologyError::TopicReadTwice {
                    topic: topic_name,
                    first: first.to_owned(),
                    second: def.name.clone(),
                });
            }
        }
    }
    Ok(())
}

/// Each node's parents by index, checked: known, not sinks, not a global store's nodes
/// (except a global processor's own source), and forwarding what the child takes.
fn resolve_parents(
    defs: &[NodeDef],
    index: &HashMap<&str, usize>,
) -> Result<Vec<Vec<usize>>, TopologyError> {
    defs.iter()
        .map(|def| {
            let needs_parent = !matches!(
                def.kind,
                DefKind::Source { .. } | DefKind::GlobalSource { .. }
            );
            if needs_parent && def.parents.is_empty() {
                return Err(TopologyError::NoParent {
                    node: def.name.clone(),
                });
            }
            def.parents
                .iter()
                .map(|parent| {
                    let &i =
                        index
                            .get(parent.as_str())
                            .ok_or_else(|| TopologyError::UnknownParent {
                                node: def.name.clone(),
                                parent: parent.clone(),
                            })?;
                    check_edge(def, &defs[i])?;
                    Ok(i)
                })
                .collect()
        })
        .collect()
}

fn check_edge(child: &NodeDef, parent: &NodeDef) -> Result<(), TopologyError> {
    let named = || (child.name.clone(), parent.name.clone());
    match (&parent.kind, &child.kind) {
        (DefKind::Sink { .. }, _) => {
            let (node, parent) = named();
            return Err(TopologyError::SinkAsParent { node, parent });
        }
        (DefKind::GlobalSource { .. }, DefKind::GlobalProcessor { .. }) => {}
        (DefKind::GlobalSource { .. } | DefKind::GlobalProcessor { .. }, _)
        | (_, DefKind::GlobalProcessor { .. }) => {
            let (node, parent) = named();
            return Err(TopologyError::GlobalNodeAsParent { node, parent });
        }
        _ => {}
    }
    match (&parent.forwards, &child.takes) {
        (Some(found), Some(expected)) if !found.same(expected) => {
            let (node, parent) = named();
            Err(TopologyError::TypeMismatch {
                node,
                parent,
                expected: expected.to_string(),
                found: found.to_string(),
            })
        }
        _ => Ok(()),
    }
}

fn check_cycles(defs: &[NodeDef], parents: &[Vec<usize>]) -> Result<(), TopologyError> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    fn visit(
        node: usize,
        parents: &[Vec<usize>],
        marks: &mut [Mark],
        path: &mut Vec<usize>,
    ) -> Option<Vec<usize>> {
        match marks[node] {
            Mark::Done => return None,
            Mark::OnPath => {
                let start = path.iter().position(|&n| n == node).unwrap_or(0);
                return Some(path[start..].to_vec());
            }
            Mark::New => {}
        }
        marks[node] = Mark::OnPath;
        path.push(node);
        for &parent in &parents[node] {
            if let Some(cycle) = visit(parent, parents, marks, path) {
                return Some(cycle);
            }
        }
        path.pop();
        marks[node] = Mark::Done;
        None
    }
    let mut marks = vec![Mark::New; defs.len()];
    for node in 0..defs.len() {
        if let Some(mut cycle) = visit(node, parents, &mut marks, &mut Vec::new()) {
            // Walked from children to parents: name them from parent to child, from the node
            // added first.
            cycle.reverse();
            let first = cycle
                .iter()
                .enumerate()
                .min_by_key(|&(_, &n)| n)
                .map_or(0, |(i, _)| i);
            cycle.rotate_left(first);
            return Err(TopologyError::Cycle {
                nodes: cycle.into_iter().map(|n| defs[n].name.clone()).collect(),
            });
        }
    }
    Ok(())
}

/// Each node's connected stores, checked: the processor exists and is a task's processor,
/// the store is a task's store, every store has a user.
fn connect_stores(
    defs: &[NodeDef],
    index: &HashMap<&str, usize>,
    stores: &[StoreSpec],
    globals: &[StoreSpec],
    connections: &[(String, String)],
) -> Result<Vec<Vec<String>>, TopologyError> {
    let mut connected = vec![Vec::new(); defs.len()];
    for (processor, store) in connections {
        let (node, store) = (processor.clone(), store.clone());
        let &i = index
            .get(processor.as_str())
            .ok_or_else(|| TopologyError::UnknownProcessor {
                node: node.clone(),
                store: store.clone(),
            })?;
        if globals.iter().any(|spec| spec.name == store) {
            return Err(TopologyError::GlobalStoreConnected { node, store });
        }
        if !matches!(defs[i].kind, DefKind::Processor { .. }) {
            return Err(TopologyError::StoreOnNonProcessor { node, store });
        }
        if !stores.iter().any(|spec| spec.name == store) {
            return Err(TopologyError::UnknownStore { node, store });
        }
        if !connected[i].contains(&store) {
            connected[i].push(store);
        }
    }
    for spec in stores {
        if !connected.iter().flatten().any(|store| *store == spec.name) {
            return Err(TopologyError::UnusedStore {
                store: spec.name.clone(),
            });
        }
    }
    for (def, connected) in defs.iter().zip(&mut connected) {
        if let DefKind::GlobalProcessor { store, .. } = &def.kind {
            connected.push(store.clone());
        }
    }
    Ok(connected)
}

/// Kafka Streams' grouping: a node is united with its parents and with every other user of
/// its stores; groups are numbered in the order their first node was added.
fn group(defs: &[NodeDef], parents: &[Vec<usize>], stores: &[Vec<String>]) -> Vec<u32> {
    let mut roots: Vec<usize> = (0..defs.len()).collect();
    fn root(roots: &mut [usize], mut n: usize) -> usize {
        while roots[n] != n {
            roots[n] = roots[roots[n]];
            n = roots[n];
        }
        n
    }
    let unite = |roots: &mut Vec<usize>, a: usize, b: usize| {
        let (a, b) = (root(roots, a), root(roots, b));
        roots[a.max(b)] = a.min(b);
    };
    for (child, of) in parents.iter().enumerate() {
        for &parent in of {
            unite(&mut roots, child, parent);
        }
    }
    let mut first_user: HashMap<&str, usize> = HashMap::new();
    for (node, connected) in stores.iter().enumerate() {
        for store in connected {
            let first = *first_user.entry(store.as_str()).or_insert(node);
            unite(&mut roots, first, node);
        }
    }
    let mut ids: HashMap<usize, u32> = HashMap::new();
    (0..defs.len())
        .map(|node| {
            let root = root(&mut roots, node);
            let next = u32::try_from(ids.len()).unwrap_or(u32::MAX);
            *ids.entry(root).or_insert(next)
        })
        .collect()
}

fn describe_groups(nodes: &[Node]) -> (Vec<Subtopology>, Vec<GlobalStore>) {
    let count = nodes.iter().map(|n| n.subtopology + 1).max().unwrap_or(0);
    let mut subtopologies = Vec::new();
    let mut globals = Vec::new();
    for id in 0..count {
        let members: Vec<&Node> = nodes.iter().filter(|n| n.subtopology == id).collect();
        let global = members.iter().find_map(|n| match &n.kind {
            DefKind::GlobalSource { topic, .. } => Some((n, topic)),
            _ => None,
        });
        if let Some((source, topic)) = global {
            let processor = members.iter().find_map(|n| match &n.kind {
                DefKind::GlobalProcessor { store, .. } => Some((n.name.clone(), store.clone())),
                _ => None,
            });
            let (processor, store) = processor.unwrap_or_default();
            globals.push(GlobalStore {
                id,
                store,
                source: source.name.clone(),
                topic: topic.clone(),
                processor,
            });
            continue;
        }
        let mut sub = Subtopology {
            id,
            nodes: Vec::new(),
            source_topics: Vec::new(),
            sink_topics: Vec::new(),
            stores: Vec::new(),
        };
        for node in members {
            sub.nodes.push(node.name.clone());
            match &node.kind {
                DefKind::Source { topics, .. } => sub.source_topics.extend(topics.iter().cloned()),
                DefKind::Sink {
                    topic: SinkTopic::Fixed(topic),
                    ..
                } if !sub.sink_topics.contains(topic) => sub.sink_topics.push(topic.clone()),
                _ => {}
            }
            for store in &node.stores {
                if !sub.stores.contains(store) {
                    sub.stores.push(store.clone());
                }
            }
        }
        subtopologies.push(sub);
    }
    (subtopologies, globals)
}
