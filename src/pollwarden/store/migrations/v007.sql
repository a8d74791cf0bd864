-- pollwarden schema 7: reserved for another part of issue 23 (the lead engineer assigned v006 and v007 to other
-- parts; this branch holds the number so that its v008 applies in order). Replaced by that part's file at merge.
SELECT 1;
