-- Checks the rows stored before V17 against `platform_allowed` (they were
-- checked against the same list when written). Its own migration, so its
-- own transaction: VALIDATE holds a lock that lets writes go on, not V17's.
ALTER TABLE registrations VALIDATE CONSTRAINT registrations_platform_allowed;
ALTER TABLE delivery_batches VALIDATE CONSTRAINT delivery_batches_platform_allowed;
