//! Carrying out the core's writes: each group's entries (data into its partition log,
//! Raft's own into its record) and HardState, the one journal pass that makes them
//! durable, and the writes that must wait (a snapshot being copied, entries a full
//! disk refused).

use crate::replication::shell::*;

impl Replication {
    /// Writes every request's entries and HardState, then waits for the one journal
    /// pass that makes them durable. Returns the (group, ready) pairs now durable. A
    /// group whose entries could not be written is left out, and they are tried
    /// again (`drain_deferred`); one whose state or journal write failed after its
    /// entries were appended is tried again until it is durable (`retry_unpersisted`).
    /// A leader's snapshot, and every later write of its group until it is copied, go
    /// to the group's deferred writes too.
    pub(super) async fn persist(self: &Rc<Self>, requests: &[PersistRequest]) -> Vec<(GroupId, u64)> {
        let mut now = Vec::with_capacity(requests.len());
        for req in requests {
            let Some(r) = self.replica(req.group) else { continue };
            if !r.deferring.get() && req.snapshot.is_none() {
                now.push(req.clone());
                continue;
            }
            self.defer(r, req.clone(), false);
        }
        let mut durable = self.write(&now).await;
        durable.extend(self.retry_unpersisted().await);
        durable
    }

    /// Queues `req` in `r`'s deferred writes (`first`: ahead of them, for entries tried
    /// again) and starts carrying them out unless that runs already.
    fn defer(self: &Rc<Self>, r: Rc<Replica>, req: PersistRequest, first: bool) {
        {
            let mut deferred = r.deferred.borrow_mut();
            if first {
                deferred.insert(0, req);
            } else {
                deferred.push(req);
            }
        }
        if !r.deferring.replace(true) {
            glommio::spawn_local(self.clone().drain_deferred(r)).detach();
        }
    }

    /// Carries out a group's deferred writes, in order, until none is left: a leader's
    /// snapshot, tried again each second until its batches are copied, and entries,
    /// tried again every `PERSIST_RETRY_INTERVAL` while they cannot be written.
    async fn drain_deferred(self: Rc<Self>, r: Rc<Replica>) {
        let current = |me: &Self| !me.stopped.get() && me.replica(r.group).is_some_and(|now| Rc::ptr_eq(&now, &r));
        loop {
            if !current(&self) {
                return;
            }
            let next = {
                let mut deferred = r.deferred.borrow_mut();
                (!deferred.is_empty()).then(|| deferred.remove(0))
            };
            let Some(req) = next else {
                r.deferring.set(false);
                return;
            };
            if let Some(install) = &req.snapshot {
                let _permit = self.installs.acquire_permit(1).await;
                while let Err(e) = self.install_snapshot(&r, &req, install).await {
                    tracing::warn!(group = %r.group, error = %e, "installing a snapshot failed; trying again");
                    disk::sleep(Duration::from_secs(1)).await;
                    if !current(&self) {
                        return;
                    }
                }
                let mut multi = self.multi.borrow_mut();
                let _ = multi.persisted(r.group, req.ready);
                let _ = multi.applied(r.group, install.index);
            } else {
                let durable = self.write(std::slice::from_ref(&req)).await;
                {
                    let mut multi = self.multi.borrow_mut();
                    for (group, ready) in durable {
                        let _ = multi.persisted(group, ready);
                    }
                }
                // `write` put back in front what it could not write.
                if r.deferred.borrow().first().is_some_and(|d| d.ready == req.ready) {
                    disk::sleep(retry::PERSIST_RETRY_INTERVAL).await;
                }
            }
            self.wake.notify();
        }
    }

    /// Replaces the replica's log by the leader's up to the snapshot: notes durably
    /// that a copy is under way, copies the batches below the snapshot's offset from
    /// the leader, then writes the group's record as of the snapshot.
    async fn install_snapshot(
        &self,
        r: &Rc<Replica>,
        req: &PersistRequest,
        install: &SnapshotInstall,
    ) -> Result<(), String> {
        let (term, vote) = req.hard_state.as_ref().map_or_else(
            || {
                let record = r.record.borrow();
                (record.term, record.vote)
            },
            |hs| (hs.term, hs.vote),
        );
        let rebuild = r.record.borrow().rebuild;
        let copying = GroupRecord { term, vote, installing: true, rebuild, ..Default::default() };
        self.write_record(r.group, &copying).await?;
        tracing::info!(group = %r.group, index = install.index, offset = install.offset,
            "copying a leader's log up to its snapshot");
        if let Some(f) = &r.on_truncate {
            f(0);
        }
        let addrs = &self.kafka_addrs;
        let leader_addr = || addrs.borrow().as_ref().and_then(|f| r.leader.get().and_then(f));
        let state: RefCell<Vec<StateChange>> = RefCell::new(Vec::new());
        let on_batch = |h: &BatchHeader, b: &[u8]| {
            if let Some(f) = &r.on_append {
                state.borrow_mut().extend(f(h, b));
            }
        };
        let offset = install.offset as i64;
        let log_start =
            crate::replication::install::copy_below(&r.log, r.group, offset, &leader_addr, &on_batch).await?;
        self.flush.appended(&r.log);
        let state = state.into_inner();
        if !state.is_empty() {
            self.write_state(&state).await.map_err(|e| e.to_string())?;
        }
        wait_durable(&r.log).await?;
        {
            let mut l = r.log.borrow_mut();
            l.skip_to(offset);
            l.set_high_watermark(offset);
        }
        if log_start > r.log.borrow().log_start_offset {
            keel_storage::retention::delete_records(&r.log, log_start).await.map_err(|e| e.to_string())?;
        }
        let commit = req.hard_state.as_ref().map_or(install.index, |hs| hs.commit.max(install.index));
        let mut record = GroupRecord {
            term,
            vote,
            commit,
            base: (install.index, install.term, install.offset),
            log_start,
            rebuild,
            ..Default::default()
        };
        record.set_conf(&install.conf_state, install.conf_index);
        self.write_record(r.group, &record).await?;
        r.log.borrow_mut().set_replicas_have(offset);
        *r.record.borrow_mut() = record;
        r.recorded_base.set(install.index);
        r.written_index.set(install.index);
        r.everyone_has.set(install.index);
        tracing::info!(group = %r.group, index = install.index, "snapshot installed");
        Ok(())
    }

    pub(in crate::replication) async fn write_record(
        &self,
        group: GroupId,
        record: &GroupRecord,
    ) -> Result<(), String> {
        self.write_state(&[record_change(group, record)]).await.map_err(|e| e.to_string())
    }

    /// Writes state-store changes durably (a group's record, a partition's state).
    pub(super) async fn write_state(&self, changes: &[StateChange]) -> Result<(), StorageError> {
        let changes: Vec<(&str, Option<Bytes>)> = changes.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
        self.kv.write(&changes).await
    }

    /// `persist` for the writes that go ahead now. Entries that cannot be written (a
    /// full disk refusing a new segment or a truncation) go back in front of their
    /// group's deferred writes, with the group's later requests, to be tried again:
    /// dropped, they left the log short of what the Raft core holds, and every later
    /// write of the group failed.
    async fn write(self: &Rc<Self>, requests: &[PersistRequest]) -> Vec<(GroupId, u64)> {
        let mut failed: Vec<GroupId> = Vec::new();
        let mut written = Vec::new();
        // The state-store changes of the pass, by group.
        let mut records: Vec<(GroupId, StateChange)> = Vec::new();
        // Snapshot points now on disk: retention and compaction may work below them.
        let mut recorded_bases: Vec<(Rc<Replica>, i64)> = Vec::new();
        for req in requests {
            let Some(r) = self.replica(req.group) else { continue };
            if failed.contains(&req.group) {
                self.defer(r, req.clone(), false);
                continue;
            }
            let mut changes = Vec::new();
            let entries_written = self.write_entries(&r, &req.entries, &mut changes).await;
            records.extend(changes.into_iter().map(|c| (req.group, c)));
            if let Err((e, done)) = entries_written {
                tracing::error!(group = %req.group, error = %e, "cannot write Raft entries; trying again");
                failed.push(req.group);
                // Own entries it wrote are in the record in memory only.
                r.record_due.set(true);
                let rest = PersistRequest { entries: req.entries[done..].to_vec(), ..req.clone() };
                self.defer(r, rest, true);
                continue;
            }
            if self.replica(req.group).is_none() {
                // Removed while its entries were written: its record was deleted with
                // it and must not be written again.
                continue;
            }
            if let Some(hs) = &req.hard_state {
                let mut record = r.record.borrow_mut();
                record.term = hs.term;
                record.vote = hs.vote;
                record.commit = hs.commit;
            }
            // A HardState where only the commit index moved (no entries, no sync asked)
            // rides along with the next record written: a lower commit index after a
            // crash is safe.
            let hard_state_due = req.hard_state.is_some() && (req.must_sync || !req.entries.is_empty());
            // A leader whose commits arrive apart from its appends rarely has a
            // HardState due: its snapshot point (which retention and compaction wait
            // for) is written once it has moved far enough.
            let base_due = r.record.borrow().base.0 >= r.recorded_base.get() + BASE_WRITE_EVERY;
            if hard_state_due || base_due || r.record_due.replace(false) {
                let record = r.record.borrow();
                r.recorded_base.set(record.base.0);
                records.push((req.group, record_change(req.group, &record)));
                if r.on_commit.is_none() {
                    recorded_bases.push((r.clone(), record.base.2 as i64));
                }
            }
            written.push((r, req.ready));
        }
        // A group removed while a later group's write awaited (its topic deleted) had
        // its record and state deleted with it: written now, they would come back.
        records.retain(|(group, _)| self.replica(*group).is_some());
        if !records.is_empty() {
            let records: Vec<StateChange> = records.into_iter().map(|(_, change)| change).collect();
            if let Err(e) = self.write_state(&records).await {
                tracing::error!(error = %e, "cannot write Raft state; nothing of this pass is acknowledged until it is");
                for (r, ready) in written {
                    r.record_due.set(true);
                    self.unpersisted(r, ready);
                }
                return Vec::new();
            }
            for (r, base) in recorded_bases {
                r.log.borrow_mut().set_replicas_have(base);
            }
        }
        self.durable_or_retried(written).await
    }

    /// Writes `entries` to `r`'s log (data) or record (Raft's own), first truncating a
    /// conflicting tail; adds to `state` the state-store changes the data batches call
    /// for. Own entries change the record in memory (`record_due`). On an error, also
    /// how many entries were written before it.
    ///
    /// **The record before the data that follows it.** A restart merges the log and
    /// the record by index, so a data entry may reach the disk only once the record
    /// there holds every own entry before it and none after. A data entry that follows
    /// a change to the own entries therefore waits until the record is durable: one
    /// more state-store write when a leader's first entry or a configuration change
    /// comes with data. (Written at the end of the pass instead, a crash could keep the
    /// data and lose the record; the restart then gave the data wrong Raft indexes,
    /// and the node's log diverged below the high watermark. The cluster simulation
    /// found it.)
    async fn write_entries(
        &self,
        r: &Replica,
        entries: &[Entry],
        state: &mut Vec<StateChange>,
    ) -> Result<(), (StorageError, usize)> {
        let Some(first) = entries.first() else { return Ok(()) };
        if first.index <= r.written_index.get() {
            let Some(offset) = self.offset_before(r.group, first.index) else { return Ok(()) };
            tracing::info!(group = %r.group, index = first.index, offset, "truncating a tail the leader overwrote");
            log::truncate(&r.log, offset).await.map_err(|e| (e, 0))?;
            if self.replica(r.group).is_none() {
                // Removed while the truncation awaited: nothing more is written for it.
                return Ok(());
            }
            if let Some(f) = &r.on_truncate {
                f(offset);
            }
            let mut record = r.record.borrow_mut();
            let before = record.own.len();
            record.own.retain(|e| e.index < first.index);
            if record.own.len() != before {
                r.record_due.set(true);
            }
        }
        for (done, e) in entries.iter().enumerate() {
            if is_data(e) {
                if r.record_due.get() {
                    let change = record_change(r.group, &r.record.borrow());
                    self.write_state(&[change]).await.map_err(|err| (err, done))?;
                    r.record_due.set(false);
                }
                log::roll_if_needed(&r.log, e.data.len()).await.map_err(|err| (err, done))?;
                let Some(expected) = self.offset_before(r.group, e.index) else {
                    // The group was removed (its topic deleted) while this write awaited
                    // the state store or a roll: its log goes with it.
                    return Ok(());
                };
                let header = r.log.borrow_mut().append(&e.data, i32::try_from(e.term).unwrap_or(i32::MAX), None);
                if header.base_offset != expected {
                    let corrupt = StorageError::Corrupt {
                        path: r.log.borrow().dir().to_path_buf(),
                        position: 0,
                        reason: format!(
                            "Raft entry {} written at offset {} but translated to {expected}",
                            e.index, header.base_offset
                        ),
                    };
                    return Err((corrupt, done));
                }
                if let Some(f) = &r.on_append {
                    state.extend(f(&header, &e.data));
                }
            } else {
                let offset = r.log.borrow().log_end_offset();
                r.record.borrow_mut().own.push(OwnEntry {
                    index: e.index,
                    term: e.term,
                    kind: e.get_entry_type() as i32,
                    data: e.data.to_vec(),
                    context: e.context.to_vec(),
                    offset,
                });
                r.record_due.set(true);
            }
            r.written_index.set(e.index);
        }
        self.flush.appended(&r.log);
        Ok(())
    }

    /// The Kafka offset at which entry `index` starts; none once the group is removed.
    fn offset_before(&self, group: GroupId, index: u64) -> Option<i64> {
        let multi = self.multi.borrow();
        let translator = multi.storage(group)?.translator();
        Some(translator.end_offset_of(index - 1).expect("the translator covers the entry") as i64)
    }
}
